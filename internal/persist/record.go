package persist

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"time"
)

// recordVersion is the format version written, in the high nibble of
// byte 0. Version 1 (before payload lengths) is still read.
const recordVersion = 2

// Flags, in the low nibble of byte 0.
const (
	flagHasError   = 1
	flagHasHeaders = 2 // since the headers came; a record without headers is encoded as before
)

// Record is a job as stored in the jobs hash. Topic, ID and Due are not in
// the encoding: they come from the job key and the pending set's score.
type Record struct {
	Topic string
	ID    string
	// Rev is a revision that changes on every write of the job. An
	// outcome (ack, retry, dead) applies only if the revision it started
	// from is still current.
	Rev uint32
	// Attempt counts the runs started so far: 0 before the first.
	Attempt int
	// MaxAttempts is the number of runs allowed before dead-lettering.
	MaxAttempts int
	// Created is when the job was first scheduled (second precision).
	Created time.Time
	// Due is the job's due time (microsecond precision).
	Due time.Time
	// LastError is the error of the last failed run, if any.
	LastError string
	// Finished is when the job finished (acked or cancelled): set for an
	// entry of the run history only (Store.History), not encoded.
	Finished time.Time
	// Headers are the caller's string pairs (trace context, say); nil or
	// empty when there are none. The root package bounds their size.
	Headers map[string]string
	// Payload is the caller's data.
	Payload []byte
}

// Encode returns the record's encoding (version 2):
//
//	byte 0      version<<4 | flags (1: has last error, 2: has headers)
//	bytes 1-4   revision, big endian (Lua compares these bytes)
//	bytes 5-8   created, unix seconds, big endian (clamped to 0 .. 2^32-1)
//	uvarint     attempt
//	uvarint     max attempts
//	uvarint     payload length
//	[uvarint n, n bytes]  last error, when flagged
//	[uvarint count, count × (uvarint n, n bytes key, uvarint m, m bytes value)]
//	            headers, when flagged, in key order
//	payload     exactly payload length bytes: nothing may follow
//
// With a 64-byte payload a fresh record is 76 bytes (a fixed 4-byte
// creation time pays for the payload length: version 1 had a 5-byte
// varint and no length). The headers flag came after the rest of version
// 2: a record without headers is encoded exactly as before it, so a
// process of the earlier release reads it; one with headers it takes for
// corrupt (see the README on upgrading).
func (r *Record) Encode() []byte {
	created := uint32(min(max(r.Created.Unix(), 0), 1<<32-1))
	n := 9 + uvarintLen(uint64(r.Attempt)) + uvarintLen(uint64(r.MaxAttempts)) + uvarintLen(uint64(len(r.Payload))) + len(r.Payload)
	if r.LastError != "" {
		n += uvarintLen(uint64(len(r.LastError))) + len(r.LastError)
	}
	if len(r.Headers) > 0 {
		n += uvarintLen(uint64(len(r.Headers)))
		for k, v := range r.Headers {
			n += uvarintLen(uint64(len(k))) + len(k) + uvarintLen(uint64(len(v))) + len(v)
		}
	}
	b := make([]byte, 9, n) // exact: 76 bytes for a 64-byte payload
	b[0] = recordVersion << 4
	if r.LastError != "" {
		b[0] |= flagHasError
	}
	if len(r.Headers) > 0 {
		b[0] |= flagHasHeaders
	}
	binary.BigEndian.PutUint32(b[1:5], r.Rev)
	binary.BigEndian.PutUint32(b[5:9], created)
	b = binary.AppendUvarint(b, uint64(r.Attempt))
	b = binary.AppendUvarint(b, uint64(r.MaxAttempts))
	b = binary.AppendUvarint(b, uint64(len(r.Payload)))
	if r.LastError != "" {
		b = binary.AppendUvarint(b, uint64(len(r.LastError)))
		b = append(b, r.LastError...)
	}
	if len(r.Headers) > 0 {
		b = binary.AppendUvarint(b, uint64(len(r.Headers)))
		for _, k := range slices.Sorted(maps.Keys(r.Headers)) {
			v := r.Headers[k]
			b = binary.AppendUvarint(b, uint64(len(k)))
			b = append(b, k...)
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	return append(b, r.Payload...)
}

// RevBytes returns the 4 bytes of a revision as they sit in a record.
func RevBytes(rev uint32) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], rev)
	return string(b[:])
}

// DecodeRecord decodes an encoded record (version 2, or version 1 as
// written before payload lengths). Topic, ID and Due are left for the
// caller. Malformed input, bytes after the payload included, gives an
// error wrapping ErrCorrupt, never a panic. (A version 1 record's payload
// is the rest of it: there, bytes after the payload cannot be told from
// it.) The payload aliases b.
func DecodeRecord(b []byte) (Record, error) { return decodeRecord(b, false) }

// DecodeHeader decodes a record cut before its payload (as the run
// history keeps it: see settle.lua's cut): as DecodeRecord, with no
// payload. A whole record decodes too (its payload dropped).
func DecodeHeader(b []byte) (Record, error) { return decodeRecord(b, true) }

func decodeRecord(b []byte, header bool) (Record, error) {
	var r Record
	if len(b) < 5 {
		return r, fmt.Errorf("%w: record of %d bytes", ErrCorrupt, len(b))
	}
	v := b[0] >> 4
	if v != recordVersion && v != 1 {
		return r, fmt.Errorf("%w: record version %d, want %d", ErrCorrupt, v, recordVersion)
	}
	flags := b[0] & 0x0f
	if flags&^(flagHasError|flagHasHeaders) != 0 || (v == 1 && flags&flagHasHeaders != 0) {
		return r, fmt.Errorf("%w: unknown record flags %#x", ErrCorrupt, flags)
	}
	r.Rev = binary.BigEndian.Uint32(b[1:5])
	b = b[5:]
	nvals := 3 // attempt, max attempts, created
	if v == recordVersion {
		if len(b) < 4 {
			return r, fmt.Errorf("%w: record header cut short", ErrCorrupt)
		}
		r.Created = time.Unix(int64(binary.BigEndian.Uint32(b[:4])), 0)
		b = b[4:]
		// attempt, max attempts, payload length
	}
	var vals [3]uint64
	for i := range nvals {
		x, n := binary.Uvarint(b)
		if n <= 0 {
			return r, fmt.Errorf("%w: bad varint in record header", ErrCorrupt)
		}
		vals[i], b = x, b[n:]
	}
	const maxInt32 = 1<<31 - 1
	if vals[0] > maxInt32 || vals[1] > maxInt32 || (v == 1 && vals[2] > 1<<40) {
		return r, fmt.Errorf("%w: record field out of range", ErrCorrupt)
	}
	r.Attempt, r.MaxAttempts = int(vals[0]), int(vals[1])
	if v == 1 {
		r.Created = time.Unix(int64(vals[2]), 0)
	}
	if flags&flagHasError != 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return r, fmt.Errorf("%w: bad error length in record", ErrCorrupt)
		}
		r.LastError = string(b[k : k+int(n)])
		b = b[k+int(n):]
	}
	if flags&flagHasHeaders != 0 {
		var err error
		if r.Headers, b, err = decodeHeaders(b); err != nil {
			return r, err
		}
	}
	if header { // the headers sit before the payload: a history entry keeps them
		return r, nil
	}
	if v == recordVersion && vals[2] != uint64(len(b)) {
		if vals[2] < uint64(len(b)) {
			return r, fmt.Errorf("%w: %d bytes after the payload", ErrCorrupt, uint64(len(b))-vals[2])
		}
		return r, fmt.Errorf("%w: payload of %d bytes, want %d", ErrCorrupt, len(b), vals[2])
	}
	r.Payload = b
	return r, nil
}

// decodeHeaders decodes the headers at the start of b and returns the
// rest of b.
func decodeHeaders(b []byte) (map[string]string, []byte, error) {
	count, k := binary.Uvarint(b)
	// Each pair takes at least 2 bytes: a count beyond that is corrupt
	// (and would make a huge map).
	if k <= 0 || count == 0 || count > uint64(len(b)-k)/2 {
		return nil, nil, fmt.Errorf("%w: bad header count in record", ErrCorrupt)
	}
	b = b[k:]
	h := make(map[string]string, count)
	str := func() (string, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return "", false
		}
		s := string(b[k : k+int(n)])
		b = b[k+int(n):]
		return s, true
	}
	for range count {
		key, ok1 := str()
		val, ok2 := str()
		if !ok1 || !ok2 {
			return nil, nil, fmt.Errorf("%w: bad header in record", ErrCorrupt)
		}
		h[key] = val
	}
	if len(h) != int(count) {
		return nil, nil, fmt.Errorf("%w: repeated header in record", ErrCorrupt)
	}
	return h, b, nil
}

// uvarintLen is the length of x encoded by binary.AppendUvarint.
func uvarintLen(x uint64) int {
	return (bits.Len64(x|1) + 6) / 7
}
