package persist

import (
	"encoding/binary"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRecordRoundTrip(t *testing.T) {
	t.Parallel()
	for _, r := range []Record{
		{Rev: 7, Attempt: 0, MaxAttempts: 5, Created: time.Unix(1_700_000_000, 0), Payload: []byte("hello")},
		{Rev: 0xdeadbeef, Attempt: 3, MaxAttempts: 3, Created: time.Unix(1, 0), LastError: "boom", Payload: nil},
		{Rev: 1, Attempt: 1 << 20, MaxAttempts: 1 << 30, Created: time.Unix(1<<32-1, 0), LastError: "x", Payload: make([]byte, 1<<16)},
		{Rev: 2, MaxAttempts: 1, Created: time.Unix(5, 0), Headers: map[string]string{"traceparent": "00-abc-def-01", "": "", "k": strings.Repeat("v", 300)}, Payload: []byte("p")},
		{Rev: 3, MaxAttempts: 2, Created: time.Unix(5, 0), LastError: "boom", Headers: map[string]string{"a": "1"}},
	} {
		got, err := DecodeRecord(r.Encode())
		require.NoError(t, err)
		if len(r.Payload) == 0 {
			r.Payload = []byte{}
		}
		require.Equal(t, r, got)
	}
}

// TestRecordCreatedClamped: a creation time outside what 4 bytes of unix
// seconds hold (before 1970, after 2106) is stored at the nearest end.
func TestRecordCreatedClamped(t *testing.T) {
	t.Parallel()
	for in, want := range map[int64]int64{-5: 0, 1 << 35: 1<<32 - 1} {
		r, err := DecodeRecord((&Record{Created: time.Unix(in, 0)}).Encode())
		require.NoError(t, err)
		require.Equal(t, want, r.Created.Unix())
	}
}

// TestDecodeVersion1: a record written before payload lengths (version 1:
// creation time as a varint, the payload the rest) still decodes.
func TestDecodeVersion1(t *testing.T) {
	t.Parallel()
	b := []byte{0x11, 0, 0, 0, 9, 2, 5} // v1, has error; rev 9; attempt 2, max 5
	b = binary.AppendUvarint(b, 1_700_000_000)
	b = append(binary.AppendUvarint(b, 4), "boom"...)
	b = append(b, "payload"...)
	r, err := DecodeRecord(b)
	require.NoError(t, err)
	require.Equal(t, Record{Rev: 9, Attempt: 2, MaxAttempts: 5, Created: time.Unix(1_700_000_000, 0), LastError: "boom", Payload: []byte("payload")}, r)
}

// TestDecodeBeforeHeaders: a record as the release before headers wrote it
// (version 2, no headers flag; the bytes below are that release's
// encoding) decodes with no headers, and a record without headers is
// still encoded to those very bytes, so that a process of that release
// reads what this one writes.
func TestDecodeBeforeHeaders(t *testing.T) {
	t.Parallel()
	old := []byte{
		0x21,       // version 2, has last error
		0, 0, 1, 2, // revision 258
		0x65, 0x53, 0xf1, 0x00, // created 1_700_000_000
		3, 10, 7, // attempt 3, max 10, payload length 7
		4, 'b', 'o', 'o', 'm', // last error
		'p', 'a', 'y', 'l', 'o', 'a', 'd',
	}
	want := Record{Rev: 258, Attempt: 3, MaxAttempts: 10, Created: time.Unix(1_700_000_000, 0), LastError: "boom", Payload: []byte("payload")}
	r, err := DecodeRecord(old)
	require.NoError(t, err)
	require.Equal(t, want, r)
	require.Nil(t, r.Headers)
	require.Equal(t, old, want.Encode())
	want.Headers = map[string]string{}
	require.Equal(t, old, want.Encode(), "empty headers are no headers")
}

// TestRecordHeadersEncoding: headers sit after the last error, in key
// order (so a record's bytes do not depend on map order), flagged.
func TestRecordHeadersEncoding(t *testing.T) {
	t.Parallel()
	r := Record{Rev: 1, MaxAttempts: 1, Created: time.Unix(0, 0), Headers: map[string]string{"b": "2", "a": "1"}, Payload: []byte("p")}
	b := r.Encode()
	require.Equal(t, byte(0x22), b[0])
	require.Equal(t, []byte{0, 1, 1, 2, 1, 'a', 1, '1', 1, 'b', 1, '2', 'p'}, b[9:])
	require.Equal(t, len(b), cap(b), "exact size")
	for name, bad := range map[string][]byte{
		"zero count":    append(append([]byte{}, b[:12]...), 0, 'p'),
		"count too big": append(append([]byte{}, b[:12]...), 9, 1, 'a', 1, '1', 'p'),
		"cut key":       append(append([]byte{}, b[:12]...), 1, 5, 'a'),
		"repeated":      append(append([]byte{}, b[:12]...), 2, 1, 'a', 1, '1', 1, 'a', 1, '2', 'p'),
	} {
		_, err := DecodeRecord(bad)
		require.ErrorIs(t, err, ErrCorrupt, name)
		require.ErrorContains(t, err, "header", name)
	}
}

// TestDecodeHeaderKeepsHeaders: a record cut before its payload (a run
// history entry) still has its headers.
func TestDecodeHeaderKeepsHeaders(t *testing.T) {
	t.Parallel()
	r := Record{Rev: 1, MaxAttempts: 3, Created: time.Unix(7, 0), LastError: "e", Headers: map[string]string{"traceparent": "x"}, Payload: []byte("payload")}
	b := r.Encode()
	got, err := DecodeHeader(b[:len(b)-len(r.Payload)])
	require.NoError(t, err)
	r.Payload = nil
	require.Equal(t, r, got)
}

func TestRecordSize(t *testing.T) {
	t.Parallel()
	r := Record{Rev: 1, MaxAttempts: 10, Created: time.Now(), Payload: make([]byte, 64)}
	require.Len(t, r.Encode(), 76, "a fresh record with a 64-byte payload")
}

func TestDecodeRejectsCorrupt(t *testing.T) {
	t.Parallel()
	good := (&Record{Rev: 1, MaxAttempts: 2, LastError: "e", Payload: []byte("p")}).Encode()
	for name, b := range map[string][]byte{
		"empty":         nil,
		"short":         good[:3],
		"bad version":   append([]byte{0x20}, good[1:]...),
		"unknown flags": append([]byte{0x1e}, good[1:]...),
		"cut varint":    append(append([]byte{}, good[:5]...), 0x80),
		"error too big": append(append([]byte{}, good[:8]...), 0x7f),
		"trailing":      append(append([]byte{}, good...), 'x'),
		"payload cut":   good[:len(good)-1],
		"v1 headers":    append([]byte{0x12}, good[1:]...),
	} {
		_, err := DecodeRecord(b)
		require.ErrorIs(t, err, ErrCorrupt, name)
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add((&Record{Rev: 1, MaxAttempts: 2, LastError: "e", Payload: []byte("p")}).Encode())
	f.Add((&Record{Rev: 9, Attempt: 300, Payload: []byte("payload")}).Encode())
	f.Add([]byte{0x10, 0, 0, 0, 0})
	f.Add((&Record{Rev: 2, LastError: "e", Headers: map[string]string{"k": "v", "x": ""}, Payload: []byte("p")}).Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRecord(b)
		if err != nil {
			require.ErrorIs(t, err, ErrCorrupt)
			return
		}
		// What decodes re-encodes to the same bytes (modulo varint
		// padding, which the encoder never writes).
		r2, err := DecodeRecord(r.Encode())
		require.NoError(t, err)
		require.Equal(t, r.Rev, r2.Rev)
		require.Equal(t, r.Attempt, r2.Attempt)
		require.Equal(t, r.LastError, r2.LastError)
		require.Equal(t, r.Headers, r2.Headers)
		require.Equal(t, string(r.Payload), string(r2.Payload))
	})
}

func TestJobKey(t *testing.T) {
	t.Parallel()
	topic, id, err := SplitJobKey(JobKey("orders", "a/b"))
	require.NoError(t, err)
	require.Equal(t, "orders", topic)
	require.Equal(t, "a/b", id)
	_, _, err = SplitJobKey("nokey")
	require.ErrorIs(t, err, ErrCorrupt)
	// Partitions are stable: the same key always maps to the same one.
	require.Equal(t, partitionOf("orders/1", 16), partitionOf("orders/1", 16))
	k := partitionKeys("ns", 3)
	require.Equal(t, "wq:{ns:3}:pending", k.Pending)
	require.Equal(t, "wq:{ns:3}:lease", k.Lease)
}

// TestPartitionOfIsFNV1a: the partition of a key is FNV-1a mod n, the same
// in every process and version (the inlined hash matches hash/fnv).
func TestPartitionOfIsFNV1a(t *testing.T) {
	for _, key := range []string{"", "a", "orders/o-1", "t/AbCdEfGhIjKl", strings.Repeat("x", 600)} {
		h := fnv.New32a()
		_, _ = h.Write([]byte(key))
		for _, n := range []int{1, 16, 4096} {
			require.Equal(t, int(h.Sum32()%uint32(n)), partitionOf(key, n), "%q mod %d", key, n)
		}
	}
}

// TestRandomKey: a random key is topic/ + 12 URL-safe characters, falls in
// the partition asked for when there are at most 64, and does not repeat.
func TestRandomKey(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(1, 2))
	seen := map[string]bool{}
	for _, n := range []int{1, 2, 7, 16, 64, 65, 4096} {
		for i := range 2000 {
			p := i % n
			key := RandomKey("orders", p, n, rnd.Uint64)
			topic, id, err := SplitJobKey(key)
			require.NoError(t, err)
			require.Equal(t, "orders", topic)
			require.Regexp(t, `^[A-Za-z0-9_-]{12}$`, id)
			if n <= 64 {
				require.Equal(t, p, partitionOf(key, n), "%s in %d partitions", key, n)
			}
			require.False(t, seen[key], "repeated %s", key)
			seen[key] = true
		}
	}
}

// TestRecordEncodeExactSize: Encode allocates exactly what it writes.
func TestRecordEncodeExactSize(t *testing.T) {
	t.Parallel()
	for _, r := range []Record{
		{Rev: 1, MaxAttempts: 3, Created: time.Unix(1_700_000_000, 0), Payload: make([]byte, 64)},
		{Attempt: 1 << 40, MaxAttempts: 127, Created: time.Unix(0, 0), LastError: strings.Repeat("e", 200)},
		{Attempt: 128, MaxAttempts: 1 << 62, Created: time.Unix(-5, 0)},
	} {
		b := r.Encode()
		require.Equal(t, len(b), cap(b), "%+v", r)
	}
	require.Len(t, (&Record{Rev: 1, MaxAttempts: 3, Created: time.Unix(1_700_000_000, 0), Payload: make([]byte, 64)}).Encode(), 76)
}
