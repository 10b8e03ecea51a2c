package resp

import (
	"bytes"
	"errors"
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
		ok, err := whole.scan(raw)
		k := int(split) % (len(raw) + 1)
		parts := newFrames(1 << 20)
		ok1, err1 := parts.scan(raw[:k])
		okParts, errParts := ok1, err1
		if err1 == nil {
			var ok2 int
			ok2, errParts = parts.scan(raw[k:])
			okParts = k + ok2
		}
		if (err == nil) != (errParts == nil) || (err != nil && err.Error() != errParts.Error()) {
			t.Fatalf("%q split at %d: refused whole %v, in parts %v", raw, k, err, errParts)
		}
		if err == nil && (ok != len(raw) || okParts != len(raw)) {
			t.Fatalf("%q: accepted but passes %d / %d of %d", raw, ok, okParts, len(raw))
		}
		// Refused: in parts, the refused command's bytes in the first
		// part have passed already; nothing after its start otherwise.
		if err != nil && (okParts < ok || (okParts > ok && okParts > k)) {
			t.Fatalf("%q split at %d: passes %d whole, %d in parts", raw, k, ok, okParts)
		}
		if err != nil {
			var fe frameError
			if !errors.As(err, &fe) || fe == "" {
				t.Fatalf("%q: %v is not a frameError", raw, err)
			}
		}
		// What passes, redcon parses to its end.
		rd := redcon.NewReader(bytes.NewReader(raw[:ok]))
		for range len(raw) + 1 {
			if _, err := rd.ReadCommands(); err != nil {
				return
			}
		}
	})
}
