package resp

import (
	"bytes"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/redcon"
)

// FuzzFrames: any bytes, in any two reads: the frame check never panics,
// finds the same refusal (at the same byte) whichever way the stream was
// split, and what it lets pass redcon parses without a panic and without
// looping (redcon's reader over it returns).
func FuzzFrames(f *testing.F) {
	for _, s := range []string{
		"*1\r\n$4\r\nPING\r\n", "PING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n",
		"*1\r\n$9223372036854775807\r\nx\r\n", "*9223372036854775807\r\n$1\r\nx\r\n",
		"*1\r\n$9223372036854775806\r\n", "*-1\r\n", "*0\r\n", "*1\r\n$-1\r\n", "*1\r\n:5\r\n",
		"*1048576\r\n$1\r\nx\r\n", "*1\r\n$+4\r\nPING\r\n", "\r\n\n*1\r\n$0\r\n\r\n",
		"*2\r\n$4\r\nPING\r\n$999999999999\r\n", "*1\r\n$4\r\nPI", "*1\n$4\r\nPING\r\n",
	} {
		f.Add([]byte(s), uint16(3))
	}
	f.Fuzz(func(t *testing.T, raw []byte, split uint16) {
		whole := newFrames(1 << 20)
		done, err := whole.scan(raw)
		k := int(split) % (len(raw) + 1)
		parts := newFrames(1 << 20)
		done1, err1 := parts.scan(raw[:k])
		doneParts, errParts := done1, err1
		if err1 == nil {
			done2, err2 := parts.scan(raw[k:])
			if done2 > 0 {
				doneParts = k + done2
			}
			errParts = err2
		}
		if (err == nil) != (errParts == nil) || (err != nil && err.Error() != errParts.Error()) {
			t.Fatalf("%q split at %d: refused whole %v, in parts %v", raw, k, err, errParts)
		}
		if done != doneParts {
			t.Fatalf("%q split at %d: the last whole command ends at %d, in parts at %d", raw, k, done, doneParts)
		}
		if err != nil {
			var fe frameError
			if !errors.As(err, &fe) || fe == "" {
				t.Fatalf("%q: %v is not a frameError", raw, err)
			}
		}
		// What passes (whole commands), redcon parses to its end.
		rd := redcon.NewReader(bytes.NewReader(raw[:done]))
		for range len(raw) + 1 {
			if _, err := rd.ReadCommands(); err != nil {
				return
			}
		}
	})
}

// TestWholeCommandsOnly: however a client's bytes arrive (here one at a
// time), what the connection hands redcon ends where a command ends, so
// redcon parses each command once instead of again from its start on
// every read of an unfinished one; and all of it arrives, in order.
func TestWholeCommandsOnly(t *testing.T) {
	cmds := []string{
		"*3\r\n$11\r\nWQ.SCHEDULE\r\n$1\r\np\r\n$" + strconv.Itoa(3000) + "\r\n" + strings.Repeat("x", 3000) + "\r\n",
		"PING\r\n", "\r\n", "*1\r\n$4\r\nPING\r\n",
		"*2\r\n$4\r\nECHO\r\n$" + strconv.Itoa(40000) + "\r\n" + strings.Repeat("y", 40000) + "\r\n",
	}
	ends := map[int]bool{}
	var all []byte
	for _, c := range cmds {
		all = append(all, c...)
		ends[len(all)] = true
	}
	client, server := net.Pipe()
	defer client.Close()
	go func() {
		for i := range all {
			if _, err := client.Write(all[i : i+1]); err != nil {
				return
			}
		}
	}()
	lc := newLimitedConn(server, 1<<20)
	lc.authed.Store(true)
	var got []byte
	buf := make([]byte, 4096)
	for len(got) < len(all) {
		n, err := lc.Read(buf)
		if err != nil {
			t.Fatalf("after %d bytes: %v", len(got), err)
		}
		got = append(got, buf[:n]...)
		if n < len(buf) && !ends[len(got)] {
			t.Fatalf("a read ended at %d, inside a command (ends: %v)", len(got), ends)
		}
	}
	if !bytes.Equal(got, all) {
		t.Fatal("the bytes handed on differ from those sent")
	}
}
