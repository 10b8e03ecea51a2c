package resp

import (
	"bytes"
	"strconv"
)

// The frame check: the bytes a connection sends pass it before redcon
// parses them, and limitedConn hands redcon the whole commands it finds.
// redcon (used unmodified) trusts the lengths a client states: a bulk
// length near 2^63 overflowed its bounds check and panicked on the
// connection's goroutine, where nothing recovers, which ended the whole
// process; an array length near 2^63 with no bytes to match kept the
// goroutine looping for ever. frames reads each array's and each
// argument's length from its header line alone and refuses one no client
// sends, before redcon sees it.

const (
	// maxArgs is the most arguments a command may have: Redis's own cap
	// on a multibulk length (1M).
	maxArgs = 1 << 20
	// maxBulkDefault caps an argument's length without MaxCommandBytes:
	// Redis's default proto-max-bulk-len (512 MiB).
	maxBulkDefault = 512 << 20
	// maxHeaderLine is the longest '*' or '$' line: a sign, 19 digits and
	// CRLF, with room to spare.
	maxHeaderLine = 32
)

// frameError is a frame refused by its header line; its text follows
// "ERR Protocol error: " as Redis words it.
type frameError string

func (e frameError) Error() string { return string(e) }

type frameState uint8

const (
	atStart     frameState = iota // the first byte of a command
	inInline                      // an inline command, up to its '\n'
	inArrayLine                   // a "*N\r\n" line
	atBulkStart                   // an argument's '$'
	inBulkLine                    // a "$N\r\n" line
	inBulkBody                    // an argument's bytes and CRLF
)

// frames follows a connection's byte stream command by command (the
// grammar redcon reads: RESP arrays of bulk strings, or inline lines),
// across reads. Not safe for concurrent use: the connection's reader owns
// it.
type frames struct {
	maxBulk int64
	st      frameState
	line    [maxHeaderLine]byte
	n       int   // bytes in line
	args    int   // arguments left in the current array
	skip    int64 // bytes left in the current argument, CRLF included
	// inline is set when an inline command begins (its reader clears
	// it): redcon's Raw of an inline command is not its bytes on the wire
	// (limitedConn.settle).
	inline bool
}

func newFrames(maxCommandBytes int64) *frames {
	f := &frames{maxBulk: maxBulkDefault}
	if maxCommandBytes > 0 {
		f.maxBulk = min(f.maxBulk, maxCommandBytes)
	}
	return f
}

// scan follows b, the next bytes of the stream. It returns done, the
// offset in b just past the last command that b completes (0: none), and,
// when a header line in b states a length out of bounds (or is no length
// at all), the refusal: the commands before the refused one are those up
// to done. Once refused, the stream is not followed any further.
func (f *frames) scan(b []byte) (done int, err error) {
	for i := 0; i < len(b); {
		switch f.st {
		case atStart:
			if b[i] == '*' {
				f.st, f.n = inArrayLine, 0
				i++
			} else {
				f.st, f.inline = inInline, true
			}
		case inInline:
			j := bytes.IndexByte(b[i:], '\n')
			if j < 0 {
				return done, nil
			}
			i += j + 1
			f.st, done = atStart, i
		case atBulkStart:
			if b[i] != '$' {
				return done, frameError("expected '$', got '" + string(b[i]) + "'")
			}
			f.st, f.n = inBulkLine, 0
			i++
		case inArrayLine, inBulkLine:
			c := b[i]
			i++
			if c != '\n' {
				if f.n == len(f.line) {
					return done, f.lengthError()
				}
				f.line[f.n] = c
				f.n++
				continue
			}
			if f.n == 0 || f.line[f.n-1] != '\r' {
				return done, f.lengthError()
			}
			v, perr := strconv.ParseInt(string(f.line[:f.n-1]), 10, 64)
			if f.st == inArrayLine {
				if perr != nil || v <= 0 || v > maxArgs {
					return done, f.lengthError()
				}
				f.args, f.st = int(v), atBulkStart
				continue
			}
			if perr != nil || v < 0 || v > f.maxBulk {
				return done, f.lengthError()
			}
			f.skip, f.st = v+2, inBulkBody
		case inBulkBody:
			k := int64(len(b) - i)
			if k > f.skip {
				k = f.skip
			}
			i += int(k)
			if f.skip -= k; f.skip == 0 {
				if f.args--; f.args == 0 {
					f.st, done = atStart, i
				} else {
					f.st = atBulkStart
				}
			}
		}
	}
	return done, nil
}

// lengthError is the refusal of the header line being read, in Redis's
// words.
func (f *frames) lengthError() error {
	if f.st == inArrayLine {
		return frameError("invalid multibulk length")
	}
	return frameError("invalid bulk length")
}
