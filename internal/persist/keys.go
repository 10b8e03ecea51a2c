package persist

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Errors of the store.
var (
	// ErrCorrupt marks a record or key in Redis that cannot be decoded.
	ErrCorrupt = errors.New("wheelq: corrupt record")
	// ErrNotFound is returned when a job is not in the store.
	ErrNotFound = errors.New("wheelq: job not found")
	// ErrFenced is returned when a partition's lease is held by another
	// owner, so the caller may no longer settle its jobs.
	ErrFenced = errors.New("wheelq: partition lease held by another owner")
	// ErrLayout is returned when the namespace was created with another
	// number of partitions.
	ErrLayout = errors.New("wheelq: namespace layout mismatch")
	// ErrUnsupportedClient is returned by New for a client that may send
	// keys of one call to different servers (a *redis.Ring).
	ErrUnsupportedClient = errors.New("wheelq: unsupported redis client")
	// ErrNotReplicated is returned by a write (with Options.ReplicaAcks)
	// that the primary applied but fewer replicas than asked acknowledged
	// within Options.ReplicaTimeout: it may not survive a failover.
	ErrNotReplicated = errors.New("wheelq: write not acknowledged by enough replicas")
)

// KeySep separates the topic from the id in a job key. Topics may not
// contain it; ids may.
const KeySep = "/"

// JobKey returns the key that addresses a job: topic + "/" + id. It is the
// member of the pending and dead sets and the field of the jobs hash.
func JobKey(topic, id string) string { return topic + KeySep + id }

// SplitJobKey splits a job key into topic and id.
func SplitJobKey(key string) (topic, id string, err error) {
	topic, id, ok := strings.Cut(key, KeySep)
	if !ok || topic == "" || id == "" {
		return "", "", fmt.Errorf("%w: job key %q", ErrCorrupt, key)
	}
	return topic, id, nil
}

// Keys are the Redis keys of one partition. They share the hash tag
// {ns:p}, so a script touching them runs on one Redis Cluster slot.
type Keys struct {
	Pending string // ZSET job key -> due (unix µs)
	Jobs    string // HASH job key -> record
	Dead    string // ZSET job key -> time of death (unix µs)
	Lease   string // STRING owner token (fencing)
	Loaded  string // STRING the owner's loaded-until time (unix µs)
	Inbox   string // LIST job keys scheduled by others for the owner to arm
	Running string // HASH job key -> token of the owner that claimed a run
	// Paused is a HASH of the paused topics (topic -> "1"), the same in
	// every partition, so that claim.lua reads it with its partition's
	// keys (see SetPaused).
	Paused string
	// Cancelled holds two HASHes of recent cancel calls, call token ->
	// the call's results for the partition, each for one minute (by Redis's
	// clock) in turn: a cancel sent again (its reply lost) is recognised
	// and answered as the first time (see cancel.lua).
	Cancelled [2]string
	// History and HistoryIdx are the partition's run history: a HASH job
	// key -> entry (an outcome byte, then the job's record without its
	// payload) and a ZSET job key -> finish time (unix µs), trimmed to the
	// retention (Options.HistoryAge, HistoryCount) by the scripts that add
	// to them (settle.lua, cancel.lua).
	History, HistoryIdx string
	// Ready is the prefix of the partition's ready ZSETs, one per pulled
	// topic (Ready + topic): due jobs queued for any consumer, job key ->
	// due (unix µs). Their jobs stay in Pending at their due times.
	Ready string
	// Recur is a HASH of the recurring schedules whose slot jobs fall in
	// this partition, name -> spec; RecurState a HASH of their
	// watermarks and latest slots (see recur.lua).
	Recur, RecurState string
}

func partitionKeys(ns string, p int) Keys {
	tag := "wq:{" + ns + ":" + strconv.Itoa(p) + "}:"
	return Keys{Pending: tag + "pending", Jobs: tag + "jobs", Dead: tag + "dead", Lease: tag + "lease",
		Loaded: tag + "loaded", Inbox: tag + "inbox", Running: tag + "running", Paused: tag + "paused",
		Cancelled: [2]string{tag + "cancelled0", tag + "cancelled1"},
		History:   tag + "history", HistoryIdx: tag + "history-idx", Ready: tag + "ready:",
		Recur: tag + "recur", RecurState: tag + "recur-state"}
}

func metaKey(ns string) string { return "wq:{" + ns + "}:meta" }

// partitionOf maps a job key to a partition with FNV-1a (32 bits), which
// is stable across processes and versions. It is hash/fnv's New32a, inlined
// so that it allocates nothing (it runs several times per job).
func partitionOf(key string, n int) int {
	const offset32, prime32 = 2166136261, 16777619
	h := uint32(offset32)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= prime32
	}
	return int(h % uint32(n))
}

// idAlphabet is the URL-safe base64 alphabet of random ids.
const idAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// RandomKey returns the key of a new job of topic: topic + "/" + a random
// 12-character URL-safe id. With 1 < n <= 64 partitions it chooses the id's
// last character so that the key falls in partition p (of n): 66 random
// bits and the choice of one of the about 64/n fitting characters. It
// steers nothing for larger n (p is then ignored).
func RandomKey(topic string, p, n int, random func() uint64) string {
	const offset32, prime32 = 2166136261, 16777619
	h0 := uint32(offset32)
	for i := 0; i < len(topic); i++ {
		h0 = (h0 ^ uint32(topic[i])) * prime32
	}
	h0 = (h0 ^ uint32(KeySep[0])) * prime32
	var id [12]byte
	for {
		r := random()
		r2 := random()
		for i := range id {
			id[i] = idAlphabet[r&63]
			r >>= 6
			if i == 9 {
				r = r2
			}
		}
		if n <= 1 || n > 64 {
			break
		}
		h := h0
		for _, c := range id[:11] {
			h = (h ^ uint32(c)) * prime32
		}
		start := int(r2>>12) & 63 // so that no fitting character is favoured
		found := false
		for j := range 64 {
			c := idAlphabet[(start+j)&63]
			if int(((h^uint32(c))*prime32)%uint32(n)) == p {
				id[11], found = c, true
				break
			}
		}
		if found {
			break
		}
	}
	var b strings.Builder
	b.Grow(len(topic) + len(KeySep) + len(id))
	b.WriteString(topic)
	b.WriteString(KeySep)
	b.Write(id[:])
	return b.String()
}

// SteerKey returns prefix + "." + two characters of the URL-safe
// alphabet, chosen so that the key falls in partition p of n: the same
// prefix, p and n give the same key in every process. (A third character
// is added in the rare case that two do not reach p.)
func SteerKey(prefix string, p, n int) string {
	const offset32, prime32 = 2166136261, 16777619
	h0 := uint32(offset32)
	for i := 0; i < len(prefix); i++ {
		h0 = (h0 ^ uint32(prefix[i])) * prime32
	}
	h0 = (h0 ^ '.') * prime32
	for _, a := range []byte(idAlphabet) {
		ha := (h0 ^ uint32(a)) * prime32
		for _, b := range []byte(idAlphabet) {
			if int(((ha^uint32(b))*prime32)%uint32(n)) == p {
				return prefix + "." + string([]byte{a, b})
			}
		}
	}
	for _, a := range []byte(idAlphabet) {
		if k := SteerKey(prefix+"."+string(a), p, n); k != "" {
			return k
		}
	}
	return ""
}
