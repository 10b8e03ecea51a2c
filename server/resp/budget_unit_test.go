package resp_test

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/server/resp"
)

// fakeRedcon reads a connection as redcon does, one Read each time it is
// told to (next), each Read's result sent on got.
type fakeRedcon struct {
	next chan struct{}
	got  chan readResult
}

type readResult struct {
	b   []byte
	err error
}

func newFakeRedcon(c net.Conn) *fakeRedcon {
	f := &fakeRedcon{next: make(chan struct{}), got: make(chan readResult, 1)}
	go func() {
		buf := make([]byte, 1<<20)
		for range f.next {
			n, err := c.Read(buf)
			f.got <- readResult{append([]byte(nil), buf[:n]...), err}
			if err != nil {
				return
			}
		}
	}()
	return f
}

// command is a SET-like command of a payload of size bytes.
func command(size int) []byte {
	return []byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$" + strconv.Itoa(size) + "\r\n" + strings.Repeat("x", size) + "\r\n")
}

// TestInflightAccounting: the bytes a connection holds, past its first
// 64 KiB, count against the server's budget from their reading until
// their command has run (redcon comes back for more), and all of it is
// given back when the connection closes, whether mid-command, after its
// client left, or refused; a connection the budget cannot hold is
// answered -UNAVAILABLE and takes nothing more.
func TestInflightAccounting(t *testing.T) {
	t.Parallel()
	conn, used := resp.BudgetedConns(200_000)
	eventually := func(want int64, msg string) {
		t.Helper()
		require.Eventually(t, func() bool { return used() == want }, wait, time.Millisecond, "%s: used %d, want %d", msg, used(), want)
	}
	open := func() (net.Conn, net.Conn, *fakeRedcon) {
		srv, cli := net.Pipe()
		lc := conn(srv, 1<<20)
		t.Cleanup(func() { cli.Close(); lc.Close() })
		return lc, cli, newFakeRedcon(lc)
	}
	cmd := command(150_000)
	charge := int64(len(cmd)-1) - resp.FreeBytes // all but the last byte held
	write := func(c net.Conn, b []byte) {
		go func() { _, _ = c.Write(b) }()
	}

	// A and B each hold all but the last byte of a 150 KB command.
	a, cliA, fa := open()
	fa.next <- struct{}{}
	write(cliA, cmd[:len(cmd)-1])
	eventually(charge, "A holds its unfinished command")
	b, cliB, fb := open()
	fb.next <- struct{}{}
	write(cliB, cmd[:len(cmd)-1])
	eventually(2*charge, "B holds its unfinished command")

	// C's would take the count past 200,000: refused, with what it had
	// taken given back when it is closed (as redcon does on the error).
	c, cliC, fc := open()
	fc.next <- struct{}{}
	replyC := make(chan string, 1)
	go func() { r, _ := io.ReadAll(cliC); replyC <- string(r) }()
	write(cliC, cmd[:len(cmd)-1])
	r := <-fc.got
	require.Error(t, r.err)
	require.Empty(t, r.b)
	require.NoError(t, c.Close())
	require.Equal(t, 2*charge, used(), "C's share given back")
	require.Equal(t, "-UNAVAILABLE the server holds too many bytes of unfinished commands (resp.max_inflight_bytes): retry\r\n", <-replyC)

	// A completes its command: handed on whole, and counted until redcon
	// comes back for more (it has run it then).
	write(cliA, cmd[len(cmd)-1:])
	r = <-fa.got
	require.NoError(t, r.err)
	require.Equal(t, cmd, r.b)
	require.Equal(t, 2*charge+1, used(), "A's command counts while it runs")
	fa.next <- struct{}{}
	eventually(charge, "A's command run, its bytes given back")

	// B is closed by the server mid-command (its Close, say).
	require.NoError(t, b.Close())
	r = <-fb.got
	require.Error(t, r.err)
	require.Zero(t, used(), "B's share given back")
	_ = cliB

	// A's client leaves mid-command: the read ends, and the close that
	// follows gives back its share.
	write(cliA, cmd[:100_000])
	eventually(100_000-resp.FreeBytes, "A holds a new unfinished command")
	require.NoError(t, cliA.Close())
	r = <-fa.got
	require.ErrorIs(t, r.err, io.EOF)
	require.NoError(t, a.Close())
	require.Zero(t, used(), "A's share given back")
	require.NoError(t, a.Close(), "a second close gives nothing back twice")
	require.Zero(t, used())

	// Small commands never count.
	d, cliD, fd := open()
	_ = d
	for range 3 {
		fd.next <- struct{}{}
		write(cliD, command(1000))
		r = <-fd.got
		require.NoError(t, r.err)
		require.Zero(t, used())
	}
}

// TestInflightAccountingConcurrent (run with -race): many connections at
// once send commands of random sizes, whole, cut off by their client,
// closed by the server mid-command or refused by the budget; the count
// never passes the budget, and is zero once they are all closed.
func TestInflightAccountingConcurrent(t *testing.T) {
	t.Parallel()
	const most = 1 << 20
	conn, used := resp.BudgetedConns(most)
	stop := make(chan struct{})
	sampled := make(chan int64)
	go func() {
		peak := int64(0)
		for {
			select {
			case <-stop:
				sampled <- peak
				return
			default:
				u := used()
				if u < 0 {
					t.Errorf("count below zero: %d", u)
				}
				peak = max(peak, u)
				time.Sleep(100 * time.Microsecond)
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 1))
			for range 15 {
				srv, cli := net.Pipe()
				lc := conn(srv, 256<<10)
				read := make(chan struct{})
				go func() { // redcon: read until an error, then close
					defer close(read)
					buf := make([]byte, 64<<10)
					for {
						if _, err := lc.Read(buf); err != nil {
							lc.Close()
							return
						}
					}
				}()
				go func() { _, _ = io.Copy(io.Discard, cli) }()
				var msg []byte
				for range 1 + rnd.IntN(3) {
					msg = append(msg, command(rnd.IntN(200_000))...)
				}
				switch rnd.IntN(3) {
				case 0: // whole
				case 1: // cut off by the client
					msg = msg[:rnd.IntN(len(msg))]
				case 2: // closed by the server while the client sends
					time.AfterFunc(time.Duration(rnd.IntN(2000))*time.Microsecond, func() { lc.Close() })
				}
				for len(msg) > 0 {
					n := min(len(msg), 1+rnd.IntN(40_000))
					if _, err := cli.Write(msg[:n]); err != nil {
						break
					}
					msg = msg[n:]
				}
				cli.Close()
				lc.Close()
				<-read
			}
		}()
	}
	wg.Wait()
	close(stop)
	peak := <-sampled
	require.LessOrEqual(t, peak, int64(most), "the budget was passed")
	require.Positive(t, peak, "nothing was ever counted: the test tests nothing")
	require.Zero(t, used(), "every share given back")
}

// TestSettle: a command about to block (settle) gives back the bytes of
// the commands handed on with it that ran before it, and keeps its own;
// it gives back nothing when none ran, nor when an inline command came
// with them (redcon's Raw of one is not its bytes on the wire, so what
// ran is not known).
func TestSettle(t *testing.T) {
	t.Parallel()
	conn, used := resp.BudgetedConns(1 << 20)
	srv, cli := net.Pipe()
	lc := conn(srv, 1<<20)
	t.Cleanup(func() { cli.Close(); lc.Close() })
	f := newFakeRedcon(lc)
	eventually := func(want int64, msg string) {
		t.Helper()
		require.Eventually(t, func() bool { return used() == want }, wait, time.Millisecond, "%s: used %d, want %d", msg, used(), want)
	}
	// handOn has the fake redcon read cmds: the first all but its last
	// byte, then the rest in one write, so that they are handed on
	// together.
	handOn := func(cmds ...[]byte) {
		t.Helper()
		all := bytes.Join(cmds, nil)
		cut := len(cmds[0]) - 1
		f.next <- struct{}{}
		go func() { _, _ = cli.Write(all[:cut]) }()
		eventually(int64(cut)-resp.FreeBytes, "the first command all but read")
		go func() { _, _ = cli.Write(all[cut:]) }()
		r := <-f.got
		require.NoError(t, r.err)
		require.Equal(t, all, r.b, "handed on together")
		require.Equal(t, int64(len(all))-resp.FreeBytes, used())
	}
	big, big2, small := command(300_000), command(200_000), command(100)

	handOn(big, small)
	resp.Settle(lc, len(big)) // big, the first, blocks: none ran
	require.Equal(t, int64(len(big)+len(small))-resp.FreeBytes, used(), "nothing ran")
	resp.Settle(lc, len(small)) // then small: big ran
	require.Zero(t, used(), "big ran; small is under the free bytes")

	handOn(big, big2)
	resp.Settle(lc, len(big), len(big2))
	require.Equal(t, int64(len(big2))-resp.FreeBytes, used(), "the blocking command keeps its own")

	inline := []byte("PING\r\n")
	handOn(big, inline, small)
	resp.Settle(lc, len(big), len("*1\r\n$4\r\nPING\r\n"), len(small))
	require.Equal(t, int64(len(big)+len(inline)+len(small))-resp.FreeBytes, used(), "an inline command: nothing given back")

	f.next <- struct{}{} // all run: redcon reads again
	eventually(0, "all given back")
}
