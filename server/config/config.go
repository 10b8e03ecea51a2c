// Package config is the wheelq server's configuration: one TOML file,
// overridden by environment variables (WHEELQ_SERVER_*), overridden by
// command-line flags, in that order. Every key has a default; an unknown
// key (in the file or as a WHEELQ_SERVER_ variable) and an invalid value
// are errors that name the key. Secrets (Redis's password, push signing
// secrets) are of type Secret, which prints as "****" however it is
// printed, and push URLs of type PushURL, which print with their query's
// values masked, so the effective configuration can be shown (Write)
// without leaking them.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/wheelq/wheelq/server/internal/redact"
	"github.com/wheelq/wheelq/wheel"
)

// ErrInvalid is wrapped by every error about a key or its value.
var ErrInvalid = errors.New("config: invalid")

// EnvPrefix starts the names of the environment variables that set keys:
// WHEELQ_SERVER_ then the key in capitals with '.' as '_' (http.addr is
// WHEELQ_SERVER_HTTP_ADDR).
const EnvPrefix = "WHEELQ_SERVER_"

// Config is the server's whole configuration. Its TOML keys are the
// fields' toml tags; docs/server.md and server/wheelq-server.toml explain
// each.
type Config struct {
	Redis Redis `toml:"redis"`
	Queue Queue `toml:"queue"`
	HTTP  HTTP  `toml:"http"`
	RESP  RESP  `toml:"resp"`
	Log   Log   `toml:"log"`
	Push  Push  `toml:"push"`
	// Process configures the server's process as the kernel runs it.
	Process Process `toml:"process"`
	// TokenFile names a file of tokens, one per line: "id sha256hex
	// produce=glob,glob consume=... admin=...", '#' starts a comment.
	// Read at start and on SIGHUP, in addition to the [[token]] tables.
	TokenFile string  `toml:"token_file"`
	Tokens    []Token `toml:"token"`
}

// Redis says which Redis the server's queue uses.
type Redis struct {
	// URL is redis://[user:password@]host:port/db (or rediss://).
	URL Secret `toml:"url"`
	// Addrs, instead of URL: the addresses of a Sentinel set (with
	// SentinelMaster) or of Cluster nodes (with Cluster).
	Addrs          []string `toml:"addrs"`
	SentinelMaster string   `toml:"sentinel_master"`
	Cluster        bool     `toml:"cluster"`
	Password       Secret   `toml:"password"`
	// ReplicaAcks and ReplicaTimeout are wheelq.Config's: how many
	// replicas a write waits for (0: the library's default, one on a
	// Sentinel set or Cluster, none on a single server; -1: none), and
	// for how long (0: 1s).
	ReplicaAcks    int      `toml:"replica_acks"`
	ReplicaTimeout Duration `toml:"replica_timeout"`
}

// Queue configures the wheelq queue the server runs (wheelq.Config).
type Queue struct {
	Namespace   string   `toml:"namespace"`
	Partitions  int      `toml:"partitions"`
	Concurrency int      `toml:"concurrency"`
	MaxAttempts int      `toml:"max_attempts"`
	MaxPayload  int      `toml:"max_payload"`
	InstanceID  string   `toml:"instance_id"`
	LockDir     string   `toml:"lock_dir"`
	Pull        []string `toml:"pull"`
	// Start, if false, runs no job: the server joins no team (it takes no
	// partition), and serves the API's producing and inspecting routes,
	// the dashboard and /metrics only (as a producer that is never
	// started). Pulled and pushed topics need it true.
	Start bool `toml:"start"`
}

// HTTP configures the HTTP API's listener and its limits.
type HTTP struct {
	Addr         string `toml:"addr"`
	TLSCert      string `toml:"tls_cert"`
	TLSKey       string `toml:"tls_key"`
	MaxBody      int64  `toml:"max_body"`
	MaxBatchBody int64  `toml:"max_batch_body"`
	// MaxInflightBody bounds the bytes of request bodies held at once
	// (past it: 503 unavailable, Retry-After); at least MaxBatchBody.
	MaxInflightBody   int64    `toml:"max_inflight_body"`
	MaxBatch          int      `toml:"max_batch"`
	MaxHeaderBytes    int      `toml:"max_header_bytes"`
	ReadTimeout       Duration `toml:"read_timeout"`
	ReadHeaderTimeout Duration `toml:"read_header_timeout"`
	WriteTimeout      Duration `toml:"write_timeout"`
	IdleTimeout       Duration `toml:"idle_timeout"`
	MaxWait           Duration `toml:"max_wait"`
	MaxPollsPerToken  int      `toml:"max_polls_per_token"`
	ShutdownTimeout   Duration `toml:"shutdown_timeout"`
	UI                bool     `toml:"ui"`
	UIReadOnly        bool     `toml:"ui_read_only"`
	Metrics           bool     `toml:"metrics"`
}

// RESP configures the Redis-protocol front end (off unless Addr is set).
type RESP struct {
	Addr            string   `toml:"addr"`
	MaxConns        int      `toml:"max_conns"`
	IdleTimeout     Duration `toml:"idle_timeout"`
	MaxCommandBytes int64    `toml:"max_command_bytes"`
	// MaxInflightBytes bounds the bytes of commands held at once across
	// all connections, past each connection's first 64 KiB (past it: the
	// connection gets -UNAVAILABLE and is closed); at least
	// MaxCommandBytes.
	MaxInflightBytes int64    `toml:"max_inflight_bytes"`
	MaxBlock         Duration `toml:"max_block"`
	// DelayedQueue turns on the delayedqueue compatibility commands
	// (SADD, SPOP, KEYS, SCARD, DEL).
	DelayedQueue bool `toml:"delayedqueue"`
}

// Log configures the server's log lines.
type Log struct {
	Format string `toml:"format"`
	Level  string `toml:"level"`
	Access bool   `toml:"access"`
}

// Process configures the server's process as the kernel runs it.
type Process struct {
	// SchedSlice, when set, is the time slice Linux 6.12 or later gives
	// each of the server's threads (wheel.SetSchedSlice): a short one
	// lets a thread that wakes for a due time or a reply preempt work
	// that has run longer. 0: the kernel's default. 100µs to 100ms.
	SchedSlice Duration `toml:"sched_slice"`
}

// Push configures push delivery: topics whose due jobs are POSTed to a
// URL.
type Push struct {
	// AllowHosts are the host:port pairs a push may go to; a topic's URL
	// outside them is refused at start.
	AllowHosts []string    `toml:"allow_hosts"`
	Timeout    Duration    `toml:"timeout"`
	Topics     []PushTopic `toml:"topic"`
}

// PushTopic is one pushed topic.
type PushTopic struct {
	Topic string  `toml:"topic"`
	URL   PushURL `toml:"url"`
	// Secret signs each request (Standard Webhooks): "whsec_" then the
	// base64 of at least 16 random bytes.
	Secret  Secret   `toml:"secret"`
	Timeout Duration `toml:"timeout"`
	// Concurrency, GlobalConcurrency, Rate and Per are the topic's
	// wheelq.Limit (0: none): a partner API's caps on how many calls at
	// once, in this process and across every server, and how many per Per
	// (default one second).
	Concurrency       int      `toml:"concurrency"`
	GlobalConcurrency int      `toml:"global_concurrency"`
	Rate              int      `toml:"rate"`
	Per               Duration `toml:"per"`
	// RetryBase and RetryMax are the topic's backoff: a failed push is
	// tried again after RetryBase, doubling per attempt up to RetryMax
	// (default 1h), each within ±25% (0: the queue's backoff, 1s doubling
	// up to 1h). A receiver's Retry-After still wins.
	RetryBase Duration `toml:"retry_base"`
	RetryMax  Duration `toml:"retry_max"`
}

// Token is one API token: its id (the non-secret part of the token
// "wq_<id>_<secret>"), the SHA-256 of the whole token in hex, and the
// topic patterns each permission covers.
type Token struct {
	ID      string   `toml:"id"`
	SHA256  string   `toml:"sha256"`
	Produce []string `toml:"produce"`
	Consume []string `toml:"consume"`
	Admin   []string `toml:"admin"`
}

// Default returns the configuration with every default filled in.
func Default() Config {
	return Config{
		// No Redis by default: the server never uses one it was not told
		// of (-dev runs an in-process one).
		Redis: Redis{},
		Queue: Queue{Namespace: "default", Partitions: 16, Concurrency: 64, MaxAttempts: 10, MaxPayload: 1 << 20, Start: true},
		HTTP: HTTP{
			Addr:    "127.0.0.1:8780",
			MaxBody: 2 << 20, MaxBatchBody: 16 << 20, MaxInflightBody: 256 << 20, MaxBatch: 1000, MaxHeaderBytes: 64 << 10,
			ReadTimeout: Duration(30 * time.Second), ReadHeaderTimeout: Duration(5 * time.Second),
			WriteTimeout: Duration(30 * time.Second), IdleTimeout: Duration(2 * time.Minute),
			MaxWait: Duration(60 * time.Second), MaxPollsPerToken: 1000,
			ShutdownTimeout: Duration(10 * time.Second), UI: true, Metrics: true,
		},
		RESP: RESP{MaxConns: 10000, IdleTimeout: Duration(5 * time.Minute), MaxCommandBytes: 4 << 20, MaxInflightBytes: 256 << 20, MaxBlock: Duration(60 * time.Second)},
		Log:  Log{Format: "text", Level: "info", Access: true},
		Push: Push{Timeout: Duration(10 * time.Second)},
	}
}

// Load builds the configuration: the defaults, then the TOML file at
// path (none if ""), then the environment (environ, as os.Environ gives
// it: WHEELQ_SERVER_* names), then the flags that were set (key to value),
// then Validate.
func Load(path string, environ []string, flags map[string]string) (Config, error) {
	c := Default()
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return c, fmt.Errorf("config: %w", err)
		}
		if err := Decode(&c, b); err != nil {
			return c, fmt.Errorf("config: %s: %w", path, err)
		}
	}
	for _, kv := range environ {
		name, v, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix) {
			continue
		}
		key := EnvKey(name)
		if key == "" {
			return c, fmt.Errorf("%w: environment variable %s names no key (known: %s)", ErrInvalid, name, strings.Join(envNames(), ", "))
		}
		if err := Set(&c, key, v); err != nil {
			return c, fmt.Errorf("%w (from %s)", err, name)
		}
	}
	keys := make([]string, 0, len(flags))
	for k := range flags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := Set(&c, k, flags[k]); err != nil {
			return c, err
		}
	}
	return c, c.Validate()
}

// Decode lays the TOML document b over c. A key c has no field for is an
// error naming it.
func Decode(c *Config, b []byte) error {
	md, err := toml.NewDecoder(bytes.NewReader(b)).Decode(c)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		names := make([]string, len(und))
		for i, k := range und {
			names[i] = k.String()
		}
		return fmt.Errorf("%w: unknown key(s) %s", ErrInvalid, strings.Join(names, ", "))
	}
	return nil
}

// A setting is one scalar key of Config, reachable by its dotted name.
type setting struct {
	key string
	v   reflect.Value
}

// settings lists c's scalar keys (not the [[token]] and [[push.topic]]
// tables, which only the file sets).
func settings(c *Config) []setting {
	var out []setting
	var walk func(prefix string, v reflect.Value)
	walk = func(prefix string, v reflect.Value) {
		t := v.Type()
		for i := range t.NumField() {
			tag := t.Field(i).Tag.Get("toml")
			if tag == "" || tag == "-" {
				continue
			}
			f := v.Field(i)
			key := prefix + tag
			switch {
			case f.Kind() == reflect.Struct:
				walk(key+".", f)
			case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.Struct:
				// a table array: the file's only
			default:
				out = append(out, setting{key, f})
			}
		}
	}
	walk("", reflect.ValueOf(c).Elem())
	return out
}

// Keys lists the keys an environment variable or a flag may set.
func Keys() []string {
	var c Config
	var out []string
	for _, s := range settings(&c) {
		out = append(out, s.key)
	}
	return out
}

func envNames() []string {
	var out []string
	for _, k := range Keys() {
		out = append(out, EnvName(k))
	}
	return out
}

// EnvName is the environment variable that sets key.
func EnvName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// EnvKey is the key the environment variable name sets, or "".
func EnvKey(name string) string {
	for _, k := range Keys() {
		if EnvName(k) == name {
			return k
		}
	}
	return ""
}

// Set sets key (dotted, as in the file: "http.addr") to the text value:
// numbers in decimal, durations as Go writes them ("1.5s"), booleans as
// strconv.ParseBool takes them, lists comma-separated.
func Set(c *Config, key, value string) error {
	for _, s := range settings(c) {
		if s.key != key {
			continue
		}
		if err := setText(s.v, value); err != nil {
			return fmt.Errorf("%w: %s = %q: %v", ErrInvalid, key, value, err)
		}
		return nil
	}
	return fmt.Errorf("%w: unknown key %q", ErrInvalid, key)
}

func setText(v reflect.Value, s string) error {
	switch p := v.Addr().Interface().(type) {
	case *Duration:
		return p.UnmarshalText([]byte(s))
	case *Secret:
		return p.UnmarshalText([]byte(s))
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return err
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return err
		}
		v.SetInt(n)
	case reflect.Slice:
		var parts []string
		for p := range strings.SplitSeq(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
		v.Set(reflect.ValueOf(parts))
	default:
		return fmt.Errorf("unsupported kind %v", v.Kind())
	}
	return nil
}

// Validate checks every value, naming the key of the first that is
// wrong.
func (c *Config) Validate() error {
	bad := func(key string, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalid, key, fmt.Sprintf(format, args...))
	}
	if len(c.Redis.Addrs) == 0 && c.Redis.URL != "" {
		u, err := url.Parse(string(c.Redis.URL))
		if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
			return bad("redis.url", "want redis://host:port/db or rediss://...")
		}
	} else if c.Redis.SentinelMaster != "" && c.Redis.Cluster {
		return bad("redis.cluster", "a Sentinel set (redis.sentinel_master) or a Cluster, not both")
	}
	pos := []struct {
		key string
		n   int64
	}{
		{"queue.partitions", int64(c.Queue.Partitions)}, {"queue.concurrency", int64(c.Queue.Concurrency)},
		{"queue.max_attempts", int64(c.Queue.MaxAttempts)}, {"queue.max_payload", int64(c.Queue.MaxPayload)},
		{"http.max_body", c.HTTP.MaxBody}, {"http.max_batch_body", c.HTTP.MaxBatchBody}, {"http.max_inflight_body", c.HTTP.MaxInflightBody},
		{"http.max_batch", int64(c.HTTP.MaxBatch)}, {"http.max_header_bytes", int64(c.HTTP.MaxHeaderBytes)},
		{"http.max_polls_per_token", int64(c.HTTP.MaxPollsPerToken)},
		{"resp.max_conns", int64(c.RESP.MaxConns)}, {"resp.max_command_bytes", c.RESP.MaxCommandBytes},
		{"resp.max_inflight_bytes", c.RESP.MaxInflightBytes},
	}
	for _, p := range pos {
		if p.n <= 0 {
			return bad(p.key, "%d: want above 0", p.n)
		}
	}
	if c.HTTP.MaxInflightBody < max(c.HTTP.MaxBody, c.HTTP.MaxBatchBody) {
		return bad("http.max_inflight_body", "%d is below the largest single body (http.max_body %d, http.max_batch_body %d)", c.HTTP.MaxInflightBody, c.HTTP.MaxBody, c.HTTP.MaxBatchBody)
	}
	if c.HTTP.MaxBody < int64(c.Queue.MaxPayload) {
		return bad("http.max_body", "%d is below queue.max_payload %d: a largest job could not be sent", c.HTTP.MaxBody, c.Queue.MaxPayload)
	}
	durs := []struct {
		key string
		d   Duration
	}{
		{"http.read_timeout", c.HTTP.ReadTimeout}, {"http.read_header_timeout", c.HTTP.ReadHeaderTimeout},
		{"http.write_timeout", c.HTTP.WriteTimeout}, {"http.idle_timeout", c.HTTP.IdleTimeout},
		{"http.max_wait", c.HTTP.MaxWait}, {"http.shutdown_timeout", c.HTTP.ShutdownTimeout},
		{"push.timeout", c.Push.Timeout}, {"resp.max_block", c.RESP.MaxBlock},
	}
	for _, d := range durs {
		if d.d <= 0 {
			return bad(d.key, "%v: want above 0", time.Duration(d.d))
		}
	}
	if _, _, err := net.SplitHostPort(c.HTTP.Addr); err != nil {
		return bad("http.addr", "%q: %v (want host:port)", c.HTTP.Addr, err)
	}
	if c.RESP.Addr != "" {
		_, port, err := net.SplitHostPort(c.RESP.Addr)
		if err != nil {
			return bad("resp.addr", "%q: %v (want host:port)", c.RESP.Addr, err)
		}
		if c.RESP.Addr == c.HTTP.Addr && port != "0" {
			return bad("resp.addr", "%q is http.addr too: the two need addresses of their own", c.RESP.Addr)
		}
	}
	if c.HTTP.MaxHeaderBytes < minHeaderBytes {
		return bad("http.max_header_bytes", "%d: want at least %d (a request's line and usual headers)", c.HTTP.MaxHeaderBytes, minHeaderBytes)
	}
	if c.RESP.DelayedQueue && c.RESP.Addr == "" {
		return bad("resp.delayedqueue", "needs resp.addr: the compatibility commands are RESP's")
	}
	if c.Redis.ReplicaAcks < -1 {
		return bad("redis.replica_acks", "%d: want -1 (none), 0 (the default) or a count of replicas", c.Redis.ReplicaAcks)
	}
	if c.Redis.ReplicaTimeout < 0 {
		return bad("redis.replica_timeout", "below 0 (0: 1s)")
	}
	if c.RESP.IdleTimeout < 0 {
		return bad("resp.idle_timeout", "below 0 (0: never)")
	}
	if c.RESP.MaxCommandBytes < c.HTTP.MaxBody {
		return bad("resp.max_command_bytes", "%d is below http.max_body %d: a largest job could not be sent", c.RESP.MaxCommandBytes, c.HTTP.MaxBody)
	}
	if c.RESP.MaxInflightBytes < c.RESP.MaxCommandBytes {
		return bad("resp.max_inflight_bytes", "%d is below resp.max_command_bytes %d: a largest command could not be held", c.RESP.MaxInflightBytes, c.RESP.MaxCommandBytes)
	}
	if (c.HTTP.TLSCert == "") != (c.HTTP.TLSKey == "") {
		return bad("http.tls_cert", "tls_cert and tls_key go together")
	}
	if d := c.Process.SchedSlice.D(); d != 0 && (d < wheel.MinSchedSlice || d > wheel.MaxSchedSlice) {
		return bad("process.sched_slice", "%v: want 0 (the kernel's default) or %v to %v", d, wheel.MinSchedSlice, wheel.MaxSchedSlice)
	}
	if !slices.Contains([]string{"text", "json"}, c.Log.Format) {
		return bad("log.format", "%q: want text or json", c.Log.Format)
	}
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, c.Log.Level) {
		return bad("log.level", "%q: want debug, info, warn or error", c.Log.Level)
	}
	if !c.Queue.Start && (len(c.Queue.Pull) > 0 || len(c.Push.Topics) > 0) {
		return bad("queue.start", "false runs no job: queue.pull and [[push.topic]] need it true")
	}
	for i, p := range c.Push.Topics {
		key := fmt.Sprintf("push.topic[%d]", i)
		if p.Topic == "" {
			return bad(key+".topic", "empty")
		}
		if slices.Contains(c.Queue.Pull, p.Topic) {
			return bad(key+".topic", "%q is also in queue.pull: a topic is pushed or pulled, not both", p.Topic)
		}
		u, err := url.Parse(p.URL.Reveal())
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return bad(key+".url", "%q: want http(s)://host:port/path", p.URL)
		}
		if u.User != nil {
			return bad(key+".url", "credentials in the URL (%s): a push sends none; the receiver checks the webhook-signature instead", p.URL)
		}
		if !slices.Contains(c.Push.AllowHosts, u.Host) {
			return bad(key+".url", "host %q is not in push.allow_hosts %v", u.Host, c.Push.AllowHosts)
		}
		if !strings.HasPrefix(string(p.Secret), "whsec_") {
			return bad(key+".secret", "want whsec_ then base64 of random bytes")
		}
		if p.Timeout < 0 {
			return bad(key+".timeout", "below 0")
		}
		if p.RetryBase < 0 {
			return bad(key+".retry_base", "below 0 (0: the queue's backoff)")
		}
		if p.RetryMax != 0 && (p.RetryBase == 0 || p.RetryMax < p.RetryBase) {
			return bad(key+".retry_max", "%v needs a retry_base of at most it", p.RetryMax.D())
		}
	}
	for i, t := range c.Tokens {
		key := fmt.Sprintf("token[%d]", i)
		if t.ID == "" || strings.ContainsAny(t.ID, "_ \t") {
			return bad(key+".id", "%q: want a non-empty name without '_' or spaces", t.ID)
		}
		if len(t.SHA256) != 64 {
			return bad(key+".sha256", "want the 64 hex digits of the token's SHA-256")
		}
	}
	return nil
}

// Loopback says whether the HTTP address, and the RESP one if set, listen
// on loopback only.
func (c *Config) Loopback() bool {
	return loopback(c.HTTP.Addr) && (c.RESP.Addr == "" || loopback(c.RESP.Addr))
}

func loopback(addr string) bool {
	host, _, _ := net.SplitHostPort(addr)
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Write writes the configuration as TOML, secrets and push URLs' query
// values masked.
func (c Config) Write(w io.Writer) error {
	return toml.NewEncoder(w).Encode(c)
}

// Duration is a time.Duration written as Go writes it ("1.5s") in TOML.
type Duration time.Duration

// UnmarshalText reads "1.5s", "250ms", "2m".
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes the duration as Go does.
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(time.Duration(d).String()), nil
}

// D is the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Secret is a string never printed: String, GoString, MarshalText and
// MarshalJSON all give "****" (or "" when empty). Reveal gives the value.
type Secret string

const masked = "****"

func (s Secret) mask() string {
	if s == "" {
		return ""
	}
	return masked
}

// String masks the secret.
func (s Secret) String() string { return s.mask() }

// GoString masks the secret.
func (s Secret) GoString() string { return strconv.Quote(s.mask()) }

// MarshalText masks the secret.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.mask()), nil }

// MarshalJSON masks the secret.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(strconv.Quote(s.mask())), nil }

// UnmarshalText takes the secret as written. A value starting with "/"
// names a file that holds it (as Docker secrets are mounted); its
// trailing newline is dropped.
func (s *Secret) UnmarshalText(b []byte) error {
	v := string(b)
	if strings.HasPrefix(v, "/") {
		f, err := os.ReadFile(v)
		if err != nil {
			return err
		}
		v = strings.TrimRight(string(f), "\r\n")
	}
	*s = Secret(v)
	return nil
}

// Reveal gives the secret's value.
func (s Secret) Reveal() string { return string(s) }

// PushURL is a push target's URL, printed (String, GoString, MarshalText,
// MarshalJSON: -print-config, the refusals of Validate) with its query's
// values, a password and a fragment masked ("?token=xxxxx"; the keys stay,
// to say which URL it is), as a receiver may take its token in the query.
// A value that does not parse is not printed at all. Reveal gives it
// whole.
type PushURL string

// String masks the URL's secrets.
func (u PushURL) String() string {
	if u == "" {
		return ""
	}
	return redact.String(string(u))
}

// GoString masks the URL's secrets.
func (u PushURL) GoString() string { return strconv.Quote(u.String()) }

// MarshalText masks the URL's secrets.
func (u PushURL) MarshalText() ([]byte, error) { return []byte(u.String()), nil }

// MarshalJSON masks the URL's secrets.
func (u PushURL) MarshalJSON() ([]byte, error) { return []byte(strconv.Quote(u.String())), nil }

// UnmarshalText takes the URL as written.
func (u *PushURL) UnmarshalText(b []byte) error {
	*u = PushURL(b)
	return nil
}

// Reveal gives the URL whole.
func (u PushURL) Reveal() string { return string(u) }

// minHeaderBytes is the least http.max_header_bytes: below it, ordinary
// requests (a token, a user agent, a host) would be refused.
const minHeaderBytes = 1024
