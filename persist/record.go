package persist

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"time"
)

// recordVersion is the format version, in the high nibble of byte 0.
const recordVersion = 1

const flagHasError = 1 // low nibble of byte 0

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
	// Payload is the caller's data.
	Payload []byte
}

// Encode returns the record's encoding:
//
//	byte 0      version<<4 | flags (1: has last error)
//	bytes 1-4   revision, big endian (Lua compares these bytes)
//	uvarint     attempt
//	uvarint     max attempts
//	uvarint     created, unix seconds
//	[uvarint n, n bytes]  last error, when flagged
//	rest        payload
//
// With a 64-byte payload a fresh record is 76 bytes.
func (r *Record) Encode() []byte {
	created := uint64(max(r.Created.Unix(), 0))
	n := 5 + uvarintLen(uint64(r.Attempt)) + uvarintLen(uint64(r.MaxAttempts)) + uvarintLen(created) + len(r.Payload)
	if r.LastError != "" {
		n += uvarintLen(uint64(len(r.LastError))) + len(r.LastError)
	}
	b := make([]byte, 5, n) // exact: 76 bytes for a 64-byte payload
	b[0] = recordVersion << 4
	if r.LastError != "" {
		b[0] |= flagHasError
	}
	binary.BigEndian.PutUint32(b[1:5], r.Rev)
	b = binary.AppendUvarint(b, uint64(r.Attempt))
	b = binary.AppendUvarint(b, uint64(r.MaxAttempts))
	b = binary.AppendUvarint(b, created)
	if r.LastError != "" {
		b = binary.AppendUvarint(b, uint64(len(r.LastError)))
		b = append(b, r.LastError...)
	}
	return append(b, r.Payload...)
}

// RevBytes returns the 4 bytes of a revision as they sit in a record.
func RevBytes(rev uint32) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], rev)
	return string(b[:])
}

// DecodeRecord decodes an encoded record. Topic, ID and Due are left for
// the caller. Malformed input gives an error wrapping ErrCorrupt, never a
// panic. The payload aliases b.
func DecodeRecord(b []byte) (Record, error) {
	var r Record
	if len(b) < 5 {
		return r, fmt.Errorf("%w: record of %d bytes", ErrCorrupt, len(b))
	}
	if v := b[0] >> 4; v != recordVersion {
		return r, fmt.Errorf("%w: record version %d, want %d", ErrCorrupt, v, recordVersion)
	}
	flags := b[0] & 0x0f
	if flags&^flagHasError != 0 {
		return r, fmt.Errorf("%w: unknown record flags %#x", ErrCorrupt, flags)
	}
	r.Rev = binary.BigEndian.Uint32(b[1:5])
	b = b[5:]
	var vals [3]uint64
	for i := range vals {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return r, fmt.Errorf("%w: bad varint in record header", ErrCorrupt)
		}
		vals[i], b = v, b[n:]
	}
	const maxInt32 = 1<<31 - 1
	if vals[0] > maxInt32 || vals[1] > maxInt32 || vals[2] > 1<<40 {
		return r, fmt.Errorf("%w: record field out of range", ErrCorrupt)
	}
	r.Attempt, r.MaxAttempts = int(vals[0]), int(vals[1])
	r.Created = time.Unix(int64(vals[2]), 0)
	if flags&flagHasError != 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return r, fmt.Errorf("%w: bad error length in record", ErrCorrupt)
		}
		r.LastError = string(b[k : k+int(n)])
		b = b[k+int(n):]
	}
	r.Payload = b
	return r, nil
}

// uvarintLen is the length of x encoded by binary.AppendUvarint.
func uvarintLen(x uint64) int {
	return (bits.Len64(x|1) + 6) / 7
}
