// Command mem measures Redis used_memory per job for candidate key layouts
// of wheelq's pending set and run history (issue 32). It starts its own
// redis-server on a free loopback port in a temp dir, loads N jobs in the
// layout, and reports (used_memory loaded - used_memory after FLUSHALL SYNC)
// / N, plus encodings of a sample of keys. Throwaway research code.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	layout   = flag.String("layout", "base", "base|A|B|L|C|D|inline|H0|H1|H2|H3")
	n        = flag.Int("n", 1000000, "jobs")
	parts    = flag.Int("p", 16, "partitions")
	nb       = flag.Int("nb", 2048, "id-buckets per partition")
	idLen    = flag.Int("idlen", 16, "id length")
	topic    = flag.String("topic", "t", "topic")
	payLen   = flag.Int("payload", 64, "payload bytes")
	spread   = flag.Duration("spread", time.Hour, "due times spread uniformly over now..now+spread")
	tbucket  = flag.Duration("tb", time.Second, "time bucket width (layout C)")
	errLen   = flag.Int("errlen", 0, "last error length in history records (H*)")
	cfg      = flag.String("cfg", "", "extra redis config, e.g. 'hash-max-listpack-value 128,hash-max-listpack-entries 512'")
	keepOpen = flag.Bool("sample", true, "print encodings of sample keys")
)

const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

func fnv(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}

// record encodes a fresh record as record.go does (version 2).
func record(payload []byte, errText string) []byte {
	b := make([]byte, 9, 12+len(payload)+len(errText))
	b[0] = 2 << 4
	if errText != "" {
		b[0] |= 1
	}
	binary.BigEndian.PutUint32(b[1:5], rand.Uint32())
	binary.BigEndian.PutUint32(b[5:9], uint32(time.Now().Unix()))
	b = binary.AppendUvarint(b, 0)
	b = binary.AppendUvarint(b, 25)
	b = binary.AppendUvarint(b, uint64(len(payload)))
	if errText != "" {
		b = binary.AppendUvarint(b, uint64(len(errText)))
		b = append(b, errText...)
	}
	return append(b, payload...)
}

type job struct {
	key  string
	rec  []byte
	due  int64 // unix µs
	part int
	bkt  int
}

func startRedis(extra string) (*exec.Cmd, string) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, _ := os.MkdirTemp("", "issue32-redis-")
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}
	for _, kv := range strings.Split(extra, ",") {
		if f := strings.Fields(kv); len(f) == 2 {
			args = append(args, "--"+f[0], f[1])
		}
	}
	cmd := exec.Command("redis-server", args...)
	cmd.Stdout, _ = os.Create(filepath.Join(dir, "log"))
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for i := 0; i < 100; i++ {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cmd, addr
}

func usedMemory(ctx context.Context, c *redis.Client) int64 {
	s := c.Info(ctx, "memory").Val()
	for _, line := range strings.Split(s, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			x, _ := strconv.ParseInt(v, 10, 64)
			return x
		}
	}
	panic("no used_memory")
}

func tag(p int) string { return "wq:{ns:" + strconv.Itoa(p) + "}:" }

// pipe sends commands in pipelines of 1000.
type pipe struct {
	ctx context.Context
	p   redis.Pipeliner
	k   int
}

func (q *pipe) do(args ...any) {
	q.p.Do(q.ctx, args...)
	q.k++
	if q.k == 1000 {
		q.flush()
	}
}
func (q *pipe) flush() {
	if q.k > 0 {
		if _, err := q.p.Exec(q.ctx); err != nil {
			panic(err)
		}
		q.k = 0
	}
}

func main() {
	flag.Parse()
	ctx := context.Background()
	cmd, addr := startRedis(*cfg)
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	defer c.Close()

	// Jobs.
	now := time.Now().UnixMicro()
	jobs := make([]job, *n)
	id := make([]byte, *idLen)
	errText := strings.Repeat("e", *errLen)
	for i := range jobs {
		for j := range id {
			id[j] = alphabet[rand.IntN(64)]
		}
		key := *topic + "/" + string(id)
		pay := make([]byte, *payLen)
		for j := range pay {
			pay[j] = byte(rand.Uint32())
		}
		h := fnv(key)
		jobs[i] = job{key: key, rec: record(pay, errText), due: now + rand.Int64N(spread.Microseconds()+1),
			part: int(h % uint32(*parts)), bkt: int((h / uint32(*parts)) % uint32(*nb))}
	}

	q := &pipe{ctx: ctx, p: c.Pipeline()}
	q.do("SET", "warm", "x") // the connection's buffers exist before the baseline
	q.flush()
	time.Sleep(200 * time.Millisecond)
	before := usedMemory(ctx, c)
	t0 := time.Now()
	samples := load(ctx, q, jobs)
	q.flush()
	loadTime := time.Since(t0)
	time.Sleep(300 * time.Millisecond)
	after := usedMemory(ctx, c)
	// Encodings and key count.
	keys := c.DBSize(ctx).Val()
	enc := map[string]int{}
	if *keepOpen {
		pl := c.Pipeline()
		var ts []*redis.StatusCmd
		var es []*redis.StringCmd
		for _, k := range samples {
			ts = append(ts, pl.Type(ctx, k))
			es = append(es, pl.ObjectEncoding(ctx, k))
		}
		pl.Exec(ctx)
		for i := range ts {
			enc[ts[i].Val()+"/"+es[i].Val()]++
		}
	}
	c.FlushAll(ctx) // sync by default in 7.0 unless lazyfree-lazy-user-flush
	time.Sleep(300 * time.Millisecond)
	flushed := usedMemory(ctx, c)
	var encs []string
	for k, v := range enc {
		encs = append(encs, fmt.Sprintf("%s:%d", k, v))
	}
	sort.Strings(encs)
	fmt.Printf("layout=%s n=%d p=%d nb=%d idlen=%d payload=%d spread=%v tb=%v errlen=%d cfg=%q keys=%d  B/job(delta)=%.1f  B/job(freed)=%.1f  load=%v  enc(sample)=%s\n",
		*layout, *n, *parts, *nb, *idLen, *payLen, *spread, *tbucket, *errLen, *cfg, keys,
		float64(after-before)/float64(*n), float64(after-flushed)/float64(*n), loadTime.Round(time.Millisecond), strings.Join(encs, " "))
}

// load writes the jobs in the layout and returns some keys to sample.
func load(ctx context.Context, q *pipe, jobs []job) []string {
	// group by (partition, bucket)
	type pb struct{ p, b int }
	groups := map[pb][]*job{}
	group := func() {
		for i := range jobs {
			j := &jobs[i]
			groups[pb{j.part, j.bkt}] = append(groups[pb{j.part, j.bkt}], j)
		}
	}
	var samples []string
	sample := func(k string) {
		samples = append(samples, k)
	}
	us := func(x int64) string { return strconv.FormatInt(x, 10) }
	switch *layout {
	case "base": // today: HASH jobs key->record, ZSET pending key->due; incremental, like Schedule
		for _, j := range jobs {
			q.do("HSET", tag(j.part)+"jobs", j.key, j.rec)
			q.do("ZADD", tag(j.part)+"pending", j.due, j.key)
		}
		for p := 0; p < *parts; p++ {
			sample(tag(p) + "jobs")
			sample(tag(p) + "pending")
		}
	case "A", "D", "inline", "Di":
		// A: per id-bucket HASH h:b {key -> hdr(12)+handle varint, handle(int) -> payload}
		//    + per id-bucket listpack ZSET z:b {key -> due} + per partition ZSET mins {b -> min due}.
		// D: as A without z:b: the due sits in the HASH value (key -> due(8)+hdr+handle); the
		//    poller scans a bucket whose min is due.
		// inline: HASH h:b {key -> record} whole (needs hash-max-listpack-value >= record) + z:b.
		group()
		for g, js := range groups {
			hk := tag(g.p) + "h:" + strconv.Itoa(g.b)
			zk := tag(g.p) + "z:" + strconv.Itoa(g.b)
			hargs := []any{"HSET", hk}
			zargs := []any{"ZADD", zk}
			min := int64(1 << 62)
			for h, j := range js {
				hdr := j.rec[:len(j.rec)-*payLen]
				pay := j.rec[len(j.rec)-*payLen:]
				switch *layout {
				case "inline":
					hargs = append(hargs, j.key, j.rec)
				case "Di": // D with the whole record inline (needs hash-max-listpack-value >= 84)
					meta := binary.BigEndian.AppendUint64(nil, uint64(j.due))
					hargs = append(hargs, j.key, append(meta, j.rec...))
				case "A":
					meta := binary.AppendUvarint(append([]byte{}, hdr...), uint64(h))
					hargs = append(hargs, j.key, meta, h, pay)
				case "D":
					meta := binary.BigEndian.AppendUint64(nil, uint64(j.due))
					meta = binary.AppendUvarint(append(meta, hdr...), uint64(h))
					hargs = append(hargs, j.key, meta, h, pay)
				}
				zargs = append(zargs, j.due, j.key)
				if j.due < min {
					min = j.due
				}
			}
			if *layout == "A" || *layout == "D" {
				hargs = append(hargs, "#", len(js)) // the handle counter
			}
			q.do(hargs...)
			if *layout != "D" && *layout != "Di" {
				q.do(zargs...)
			}
			if *layout != "inline" || true {
				q.do("ZADD", tag(g.p)+"mins", min, g.b)
			}
			sample(hk)
			if *layout != "D" && *layout != "Di" {
				sample(zk)
			}
		}
		for p := 0; p < *parts; p++ {
			sample(tag(p) + "mins")
		}
	case "B", "L":
		// B: per id-bucket STRING s:b: concatenated [u8 keylen][key][uvarint reclen][record]
		//    (written whole, as a script would rewrite it) + listpack ZSET z:b {key -> due} + mins.
		// L: per id-bucket LIST l:b [key, record, key, record ...] + z:b + mins.
		group()
		for g, js := range groups {
			zk := tag(g.p) + "z:" + strconv.Itoa(g.b)
			zargs := []any{"ZADD", zk}
			var blob []byte
			largs := []any{"RPUSH", tag(g.p) + "l:" + strconv.Itoa(g.b)}
			min := int64(1 << 62)
			for _, j := range js {
				blob = append(blob, byte(len(j.key)))
				blob = append(blob, j.key...)
				blob = binary.AppendUvarint(blob, uint64(len(j.rec)))
				blob = append(blob, j.rec...)
				largs = append(largs, j.key, j.rec)
				zargs = append(zargs, j.due, j.key)
				if j.due < min {
					min = j.due
				}
			}
			if *layout == "B" {
				q.do("SET", tag(g.p)+"s:"+strconv.Itoa(g.b), blob)
				sample(tag(g.p) + "s:" + strconv.Itoa(g.b))
			} else {
				q.do(largs...)
				sample(tag(g.p) + "l:" + strconv.Itoa(g.b))
			}
			q.do(zargs...)
			q.do("ZADD", tag(g.p)+"mins", min, g.b)
			sample(zk)
		}
	case "C":
		// C: time buckets: per partition ZSET tb {bucket start -> start}; per time bucket a
		// listpack ZSET t:<start> {key -> due}; records as in A (HASH h:b per id-bucket, with
		// the due in the meta value, so that cancel finds the time bucket).
		group()
		w := tbucket.Microseconds()
		tbs := map[string]bool{}
		for g, js := range groups {
			hk := tag(g.p) + "h:" + strconv.Itoa(g.b)
			hargs := []any{"HSET", hk}
			for h, j := range js {
				hdr := j.rec[:len(j.rec)-*payLen]
				pay := j.rec[len(j.rec)-*payLen:]
				meta := binary.BigEndian.AppendUint64(nil, uint64(j.due))
				meta = binary.AppendUvarint(append(meta, hdr...), uint64(h))
				hargs = append(hargs, j.key, meta, h, pay)
			}
			hargs = append(hargs, "#", len(js))
			q.do(hargs...)
			sample(hk)
		}
		for _, j := range jobs {
			start := j.due / w * w
			tk := tag(j.part) + "t:" + us(start)
			q.do("ZADD", tk, j.due, j.key)
			if !tbs[tk] {
				tbs[tk] = true
				q.do("ZADD", tag(j.part)+"tb", start, start)
				sample(tk)
			}
		}
	case "H0": // today's history: HASH history key -> outcome+cut record, ZSET history-idx key -> finish
		for _, j := range jobs {
			cut := append([]byte{'d'}, j.rec[:len(j.rec)-*payLen]...)
			q.do("HSET", tag(j.part)+"history", j.key, cut)
			q.do("ZADD", tag(j.part)+"history-idx", j.due, j.key)
		}
		for p := 0; p < *parts; p++ {
			sample(tag(p) + "history")
			sample(tag(p) + "history-idx")
		}
	case "H1":
		// H1: per id-bucket listpack HASH y:b {key -> outcome + finish µs (8) + cut record}
		// + per partition ZSET ymins {b -> oldest finish in b} for age trimming;
		// count trimming per bucket (scan for the oldest when over the cap).
		group()
		for g, js := range groups {
			yk := tag(g.p) + "y:" + strconv.Itoa(g.b)
			args := []any{"HSET", yk}
			min := int64(1 << 62)
			for _, j := range js {
				v := append([]byte{'d'}, binary.BigEndian.AppendUint64(nil, uint64(j.due))...)
				v = append(v, j.rec[:len(j.rec)-*payLen]...)
				args = append(args, j.key, v)
				if j.due < min {
					min = j.due
				}
			}
			q.do(args...)
			q.do("ZADD", tag(g.p)+"ymins", min, g.b)
			sample(yk)
		}
	case "H2":
		// H2: per partition STREAM hist, entries {k: key, v: outcome+cut record} with the
		// stream id = finish ms (auto), trimmed by MINID/MAXLEN; plus per id-bucket listpack
		// HASH x:b {key -> stream id as one int (ms<<10|seq)} for lookup by id.
		sort.Slice(jobs, func(a, b int) bool { return jobs[a].due < jobs[b].due })
		for _, j := range jobs {
			cut := append([]byte{'d'}, j.rec[:len(j.rec)-*payLen]...)
			q.do("XADD", tag(j.part)+"hist", "*", "k", j.key, "v", cut)
			q.do("HSET", tag(j.part)+"x:"+strconv.Itoa(j.bkt), j.key, time.Now().UnixMilli()<<10)
		}
		for p := 0; p < *parts; p++ {
			sample(tag(p) + "hist")
			sample(tag(p) + "x:0")
		}
	case "H3":
		// H3: H1 without the ymins index: age and count trimming by scanning the bucket the
		// ack writes to (bounded by its size), plus a slow sweep.
		group()
		for g, js := range groups {
			yk := tag(g.p) + "y:" + strconv.Itoa(g.b)
			args := []any{"HSET", yk}
			for _, j := range js {
				v := append([]byte{'d'}, binary.BigEndian.AppendUint64(nil, uint64(j.due))...)
				v = append(v, j.rec[:len(j.rec)-*payLen]...)
				args = append(args, j.key, v)
			}
			q.do(args...)
			sample(yk)
		}
	default:
		panic("layout?")
	}
	return samples
}
