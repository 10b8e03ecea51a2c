package wheelq

import (
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/wheelq/wheelq/internal/persist"
)

// recordCache keeps the records of jobs this process will fire, so that a
// job fires without reading its payload from Redis. It is bounded twice:
// by count (Config.CacheSize) and by bytes (Config.CacheBytes), dropping
// the least recently added first. A count alone let a minute of 1 MiB jobs
// hold up to 100,000 MiB here; a record dropped is read by the claim, in
// the same round trip, when its job fires.
type recordCache struct {
	mu    sync.Mutex
	lru   *simplelru.LRU[string, *persist.Record] // guarded by mu
	bytes int64                                   // guarded by mu: the records' weights
	most  int64
}

// recordOverhead is what a record weighs besides its payload, headers and
// key: the struct, the list element and the map entry, about.
const recordOverhead = 200

func recordWeight(key string, r *persist.Record) int64 {
	n := int64(recordOverhead + len(key) + len(r.Payload) + len(r.LastError) + len(r.Topic) + len(r.ID))
	for k, v := range r.Headers {
		n += int64(len(k) + len(v))
	}
	return n
}

func newRecordCache(count int, bytes int64) (*recordCache, error) {
	c := &recordCache{most: bytes}
	l, err := simplelru.NewLRU[string, *persist.Record](count, func(key string, r *persist.Record) {
		c.bytes -= recordWeight(key, r) // under mu: every call into lru holds it
	})
	if err != nil {
		return nil, err
	}
	c.lru = l
	return c, nil
}

// Add keeps r as key's record, in place of any other; a record heavier
// than the whole byte bound is not kept (and key's old one is dropped).
func (c *recordCache) Add(key string, r *persist.Record) {
	w := recordWeight(key, r)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Remove(key)
	if w > c.most {
		return
	}
	c.lru.Add(key, r)
	c.bytes += w
	for c.bytes > c.most {
		if _, _, ok := c.lru.RemoveOldest(); !ok {
			break
		}
	}
}

// Peek returns key's record without marking it used.
func (c *recordCache) Peek(key string) (*persist.Record, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Peek(key)
}

// Remove drops key's record.
func (c *recordCache) Remove(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Remove(key)
}

// size returns the number of records kept and their weight.
func (c *recordCache) size() (int, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len(), c.bytes
}
