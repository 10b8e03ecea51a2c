// Command proto loads N jobs into layout D through its Lua scripts (../lua), measures
// used_memory per job, then times lookup / reschedule / cancel / poller windows and
// checks that the poller returns every remaining job exactly once, in its window.
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
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	n      = flag.Int("n", 1000000, "jobs")
	parts  = flag.Int("p", 16, "partitions")
	nb     = flag.Int("nb", 2048, "buckets per partition")
	idLen  = flag.Int("idlen", 16, "id length")
	payLen = flag.Int("payload", 64, "payload bytes")
	spread = flag.Duration("spread", time.Hour, "due spread")
	cfg    = flag.String("cfg", "hash-max-listpack-entries 128", "redis config")
	ops    = flag.Int("ops", 20000, "lookups, reschedules, cancels each")
	zidx   = flag.Bool("zindex", false, "also keep a listpack ZSET z:<b> key -> due per bucket and poll it with advance_z.lua (layout A/B/L's poller)")
)

const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

func fnv(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}

type job struct {
	key      string
	hdr, pay string
	due      int64
	p, b     int
	gone     bool
}

func (j *job) keys(kind ...string) []string {
	t := "wq:{ns:" + strconv.Itoa(j.p) + "}:"
	return []string{t + "h:" + strconv.Itoa(j.b), t + "mins", t + "next", t + "loaded"}
}

func script(name string) *redis.Script {
	b, err := os.ReadFile(filepath.Join("..", "lua", name+".lua"))
	if err != nil {
		panic(err)
	}
	return redis.NewScript(string(b))
}

func startRedis(extra string) (*exec.Cmd, string) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
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
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for i := 0; i < 100; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cmd, addr
}

func info(ctx context.Context, c *redis.Client, sec, field string) string {
	for _, line := range strings.Split(c.Info(ctx, sec).Val(), "\r\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			return v
		}
	}
	return ""
}

func used(ctx context.Context, c *redis.Client) int64 {
	x, _ := strconv.ParseInt(info(ctx, c, "memory", "used_memory:"), 10, 64)
	return x
}

// evalUsec returns Redis's time in EVALSHA since the last CONFIG RESETSTAT, µs, and calls.
func evalUsec(ctx context.Context, c *redis.Client) (float64, float64) {
	v := info(ctx, c, "commandstats", "cmdstat_evalsha:")
	var calls, usec float64
	for _, kv := range strings.Split(v, ",") {
		k, x, _ := strings.Cut(kv, "=")
		f, _ := strconv.ParseFloat(x, 64)
		switch k {
		case "calls":
			calls = f
		case "usec":
			usec = f
		}
	}
	return usec, calls
}

func main() {
	flag.Parse()
	ctx := context.Background()
	cmd, addr := startRedis(*cfg)
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 2, ReadTimeout: time.Minute})
	defer c.Close()
	sSched, sGet, sCancel, sResched, sAdv, sAdvZ := script("schedule"), script("get"), script("cancel"), script("reschedule"), script("advance"), script("advance_z")
	for _, s := range []*redis.Script{sSched, sGet, sCancel, sResched, sAdv, sAdvZ} {
		s.Load(ctx, c)
	}
	now := time.Now().UnixMicro()
	jobs := make([]job, *n)
	id := make([]byte, *idLen)
	for i := range jobs {
		for j := range id {
			id[j] = alphabet[rand.IntN(64)]
		}
		key := "t/" + string(id)
		pay := make([]byte, *payLen)
		for j := range pay {
			pay[j] = byte(rand.Uint32())
		}
		hdr := []byte{0x20, 0, 0, 0, 1}
		hdr = binary.BigEndian.AppendUint32(hdr, uint32(time.Now().Unix()))
		hdr = append(hdr, 0, 25)
		hdr = binary.AppendUvarint(hdr, uint64(*payLen))
		h := fnv(key)
		jobs[i] = job{key: key, hdr: string(hdr), pay: string(pay), due: now + 1 + rand.Int64N(spread.Microseconds()),
			p: int(h % uint32(*parts)), b: int((h / uint32(*parts)) % uint32(*nb))}
	}
	pl := c.Pipeline()
	flush := func() {
		if _, err := pl.Exec(ctx); err != nil && err != redis.Nil {
			panic(err)
		}
	}
	c.Set(ctx, "warm", "x", 0)
	time.Sleep(200 * time.Millisecond)
	before := used(ctx, c)
	c.ConfigResetStat(ctx)
	t0 := time.Now()
	for i := range jobs {
		j := &jobs[i]
		sSched.EvalSha(ctx, pl, j.keys(), j.key, j.due, j.hdr, j.pay, j.b)
		if *zidx {
			pl.ZAdd(ctx, "wq:{ns:"+strconv.Itoa(j.p)+"}:z:"+strconv.Itoa(j.b), redis.Z{Score: float64(j.due), Member: j.key})
		}
		if i%1000 == 999 {
			flush()
		}
	}
	flush()
	el := time.Since(t0)
	us, calls := evalUsec(ctx, c)
	time.Sleep(300 * time.Millisecond)
	after := used(ctx, c)
	// encodings of every bucket
	var cmds []*redis.StringCmd
	for p := 0; p < *parts; p++ {
		for b := 0; b < *nb; b++ {
			cmds = append(cmds, pl.ObjectEncoding(ctx, "wq:{ns:"+strconv.Itoa(p)+"}:h:"+strconv.Itoa(b)))
		}
	}
	pl.Exec(ctx)
	enc := map[string]int{}
	for _, x := range cmds {
		enc[x.Val()]++
	}
	fmt.Printf("D via schedule.lua: n=%d nb=%d cfg=%q: %.1f B/job (used_memory delta); schedule %.2f µs/call in Redis (%d calls, wall %v); bucket encodings %v\n",
		*n, *nb, *cfg, float64(after-before)/float64(*n), us/calls, int(calls), el.Round(time.Millisecond), enc)

	pick := func() *job {
		for {
			j := &jobs[rand.IntN(len(jobs))]
			if !j.gone {
				return j
			}
		}
	}
	// lookups, checked
	c.ConfigResetStat(ctx)
	var gets []*redis.Cmd
	var gj []*job
	for i := 0; i < *ops; i++ {
		j := pick()
		gets = append(gets, sGet.EvalSha(ctx, pl, j.keys()[:1], j.key))
		gj = append(gj, j)
		if i%1000 == 999 {
			flush()
		}
	}
	flush()
	us, calls = evalUsec(ctx, c)
	bad := 0
	for i, g := range gets {
		r, _ := g.Slice()
		if len(r) != 2 || r[0].(string) != strconv.FormatInt(gj[i].due, 10) || r[1].(string) != gj[i].hdr+gj[i].pay {
			bad++
		}
	}
	fmt.Printf("lookup: %.2f µs/call, %d wrong\n", us/calls, bad)
	// reschedules (to a new due within the spread; nothing is loaded yet, so no inbox)
	c.ConfigResetStat(ctx)
	for i := 0; i < *ops; i++ {
		j := pick()
		j.due = now + 1 + rand.Int64N(spread.Microseconds())
		sResched.EvalSha(ctx, pl, j.keys(), j.key, j.due, j.b)
		if *zidx {
			pl.ZAdd(ctx, "wq:{ns:"+strconv.Itoa(j.p)+"}:z:"+strconv.Itoa(j.b), redis.Z{Score: float64(j.due), Member: j.key})
		}
		if i%1000 == 999 {
			flush()
		}
	}
	flush()
	us, calls = evalUsec(ctx, c)
	fmt.Printf("reschedule: %.2f µs/call\n", us/calls)
	// cancels
	c.ConfigResetStat(ctx)
	cancelled := 0
	for i := 0; i < *ops; i++ {
		j := pick()
		j.gone = true
		cancelled++
		sCancel.EvalSha(ctx, pl, j.keys()[:3], j.key, j.b)
		if *zidx {
			pl.ZRem(ctx, "wq:{ns:"+strconv.Itoa(j.p)+"}:z:"+strconv.Itoa(j.b), j.key)
		}
		if i%1000 == 999 {
			flush()
		}
	}
	flush()
	us, calls = evalUsec(ctx, c)
	fmt.Printf("cancel: %.2f µs/call\n", us/calls)
	// the poller of every partition, 60 s windows over the spread, 256 buckets per call at most
	c.ConfigResetStat(ctx)
	seen := make(map[string]int64, *n)
	wrong, windows, bucketsRead := 0, 0, 0
	var zusec float64
	t0 = time.Now()
	for p := 0; p < *parts; p++ {
		t := "wq:{ns:" + strconv.Itoa(p) + "}:"
		L := now
		for L < now+spread.Microseconds()+60e6 {
			T := L + 60e6
			z0 := time.Now()
			bs := c.ZRangeByScore(ctx, t+"next", &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(T, 10)}).Val()
			zusec += float64(time.Since(z0).Microseconds())
			for len(bs) > 0 {
				m := min(256, len(bs))
				keys := []string{t + "next", t + "mins", t + "loaded"}
				args := []any{L, T}
				adv := sAdv
				if *zidx {
					keys, adv = []string{t + "next", t + "loaded"}, sAdvZ
				}
				for _, b := range bs[:m] {
					if *zidx {
						keys = append(keys, t+"z:"+b)
					} else {
						keys = append(keys, t+"h:"+b)
					}
					args = append(args, b)
				}
				bucketsRead += m
				r, err := adv.EvalSha(ctx, c, keys, args...).StringSlice()
				if err != nil {
					panic(err)
				}
				for k := 0; k < len(r); k += 2 {
					d, _ := strconv.ParseInt(r[k+1], 10, 64)
					if d <= L || d > T {
						wrong++
					}
					if _, dup := seen[r[k]]; dup {
						wrong++
					}
					seen[r[k]] = d
				}
				bs = bs[m:]
			}
			L = T
			windows++
		}
	}
	us, calls = evalUsec(ctx, c)
	missing := 0
	for i := range jobs {
		if d, ok := seen[jobs[i].key]; !jobs[i].gone && (!ok || d != jobs[i].due) {
			missing++
		}
	}
	fmt.Printf("poller: %d windows of 60 s, %d bucket reads, %d jobs returned (want %d), %d wrong, %d missing; advance.lua %.1f µs/call, %.2f µs/job returned, %.2f µs/bucket read (wall %v)\n",
		windows, bucketsRead, len(seen), *n-cancelled, wrong, missing, us/calls, us/float64(len(seen)), us/float64(bucketsRead), time.Since(t0).Round(time.Millisecond))
}
