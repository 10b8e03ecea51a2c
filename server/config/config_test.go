package config_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/server/config"
)

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "wheelq-server.toml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

// TestPrecedence: defaults, then the file, then the environment, then
// flags.
func TestPrecedence(t *testing.T) {
	p := write(t, `
[http]
addr = "127.0.0.1:9001"
max_wait = "30s"
[queue]
namespace = "file"
pull = ["a", "b"]
`)
	c, err := config.Load(p, nil, nil)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:9001", c.HTTP.Addr)
	require.Equal(t, 30*time.Second, c.HTTP.MaxWait.D())
	require.Equal(t, []string{"a", "b"}, c.Queue.Pull)
	require.Equal(t, 16, c.Queue.Partitions, "a default the file leaves")

	env := []string{"WHEELQ_SERVER_QUEUE_NAMESPACE=env", "WHEELQ_SERVER_HTTP_ADDR=127.0.0.1:9002", "PATH=/bin", "WHEELQ_URL=redis://x:1"}
	c, err = config.Load(p, env, nil)
	require.NoError(t, err)
	require.Equal(t, "env", c.Queue.Namespace)
	require.Equal(t, "127.0.0.1:9002", c.HTTP.Addr)

	c, err = config.Load(p, env, map[string]string{"http.addr": "127.0.0.1:9003", "queue.pull": "x, y", "log.access": "false"})
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:9003", c.HTTP.Addr)
	require.Equal(t, "env", c.Queue.Namespace)
	require.Equal(t, []string{"x", "y"}, c.Queue.Pull)
	require.False(t, c.Log.Access, "a flag can set false (Visit, not non-zero)")
}

// TestErrorsNameTheKey: unknown keys and invalid values are errors that
// name the key.
func TestErrorsNameTheKey(t *testing.T) {
	for _, c := range []struct {
		file, env string
		flags     map[string]string
		want      string
	}{
		{file: "[http]\naddrr = \"x\"\n", want: "http.addrr"},
		{file: "[htp]\naddr = \"x\"\n", want: "htp"},
		{file: "[http]\nmax_wait = \"soon\"\n", want: "max_wait"},
		{file: "[http]\nmax_body = \"big\"\n", want: "max_body"},
		{file: "[http]\nmax_body = 10\n", want: "http.max_body"},
		{file: "[log]\nformat = \"xml\"\n", want: "log.format"},
		{file: "[process]\nsched_slice = \"10us\"\n", want: "process.sched_slice"},
		{flags: map[string]string{"process.sched_slice": "1s"}, want: "process.sched_slice"},
		{file: "[http]\naddr = \"nohost\"\n", want: "http.addr"},
		{file: "[redis]\nurl = \"http://x\"\n", want: "redis.url"},
		{file: "[queue]\npartitions = 0\n", want: "queue.partitions"},
		// Caught by -check-config, not at start (found by a red team).
		{flags: map[string]string{"http.addr": "127.0.0.1:17640", "resp.addr": "127.0.0.1:17640"}, want: "resp.addr"},
		{flags: map[string]string{"http.max_header_bytes": "1"}, want: "http.max_header_bytes"},
		{flags: map[string]string{"resp.max_inflight_bytes": "1048576"}, want: "resp.max_inflight_bytes"},
		{flags: map[string]string{"resp.max_inflight_bytes": "0"}, want: "resp.max_inflight_bytes"},
		{file: "[[push.topic]]\ntopic = \"t\"\nurl = \"http://evil:80/\"\nsecret = \"whsec_AAAA\"\n", want: "allow_hosts"},
		// Credentials in the URL would be sent by no push (and printed
		// unmasked): refused, with where they go instead.
		{file: "[push]\nallow_hosts=[\"h:1\"]\n[[push.topic]]\ntopic = \"t\"\nurl = \"http://user:s3cret@h:1/\"\nsecret = \"whsec_AAAA\"\n", want: "push.topic[0].url"},
		{file: "[queue]\npull=[\"t\"]\n[push]\nallow_hosts=[\"h:1\"]\n[[push.topic]]\ntopic = \"t\"\nurl = \"http://h:1/\"\nsecret = \"whsec_AAAA\"\n", want: "pushed or pulled"},
		{file: "[push]\nallow_hosts=[\"h:1\"]\n[[push.topic]]\ntopic = \"t\"\nurl = \"http://h:1/\"\nsecret = \"whsec_AAAA\"\nretry_base = \"-1s\"\n", want: "push.topic[0].retry_base"},
		{file: "[push]\nallow_hosts=[\"h:1\"]\n[[push.topic]]\ntopic = \"t\"\nurl = \"http://h:1/\"\nsecret = \"whsec_AAAA\"\nretry_max = \"1m\"\n", want: "push.topic[0].retry_max"},
		{file: "[push]\nallow_hosts=[\"h:1\"]\n[[push.topic]]\ntopic = \"t\"\nurl = \"http://h:1/\"\nsecret = \"whsec_AAAA\"\nretry_base = \"1m\"\nretry_max = \"30s\"\n", want: "push.topic[0].retry_max"},
		{file: "[[token]]\nid = \"a_b\"\nsha256 = \"00\"\n", want: "token[0].id"},
		{file: "[[token]]\nid = \"a\"\nsha256 = \"00\"\n", want: "token[0].sha256"},
		{env: "WHEELQ_SERVER_HTTP_ADDRESS=x", want: "WHEELQ_SERVER_HTTP_ADDRESS"},
		{env: "WHEELQ_SERVER_HTTP_MAX_WAIT=forever", want: "http.max_wait"},
		{flags: map[string]string{"http.nope": "1"}, want: "http.nope"},
		{flags: map[string]string{"log.access": "maybe"}, want: "log.access"},
	} {
		var p string
		if c.file != "" {
			p = write(t, c.file)
		}
		var env []string
		if c.env != "" {
			env = []string{c.env}
		}
		_, err := config.Load(p, env, c.flags)
		require.Error(t, err, "%+v", c)
		require.True(t, errors.Is(err, config.ErrInvalid), "%v", err)
		require.Contains(t, err.Error(), c.want)
	}
}

// TestSecretsMasked: the effective configuration printed shows no secret;
// a secret starting with "/" is read from that file.
func TestSecretsMasked(t *testing.T) {
	dir := t.TempDir()
	sec := filepath.Join(dir, "pw")
	require.NoError(t, os.WriteFile(sec, []byte("s3cr3t-from-file\n"), 0o600))
	p := write(t, `
[redis]
url = "redis://:hunter2@127.0.0.1:7000/0"
password = "`+sec+`"
[push]
allow_hosts = ["127.0.0.1:9"]
[[push.topic]]
topic = "hooks"
url = "http://127.0.0.1:9/in?token=qu3ry-s3cr3t"
secret = "whsec_c2VjcmV0c2VjcmV0c2VjcmV0"
`)
	c, err := config.Load(p, nil, nil)
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:9/in?token=qu3ry-s3cr3t", c.Push.Topics[0].URL.Reveal())
	require.Equal(t, "http://127.0.0.1:9/in?token=xxxxx", c.Push.Topics[0].URL.String())
	require.Equal(t, "s3cr3t-from-file", c.Redis.Password.Reveal())
	var b bytes.Buffer
	require.NoError(t, c.Write(&b))
	out := b.String()
	for _, s := range []string{"hunter2", "s3cr3t", "whsec_c2Vj", "qu3ry"} {
		require.NotContains(t, out, s)
	}
	require.Contains(t, out, "****")
	require.Contains(t, out, `allow_hosts = ["127.0.0.1:9"]`)
	require.Contains(t, out, `url = "http://127.0.0.1:9/in?token=xxxxx"`)
	require.Equal(t, "****", c.Redis.Password.String())
	require.NotContains(t, strings.ReplaceAll(strings.ReplaceAll(stringOf(c), "\n", ""), " ", ""), "hunter2")
}

func stringOf(c config.Config) string {
	var b bytes.Buffer
	_ = c.Write(&b)
	return b.String()
}

// TestExampleFile: the example configuration in the repository loads, and
// sets every key there is.
func TestExampleFile(t *testing.T) {
	c, err := config.Load("../wheelq-server.toml", nil, nil)
	require.NoError(t, err)
	require.NotEmpty(t, c.Tokens)
	b, err := os.ReadFile("../wheelq-server.toml")
	require.NoError(t, err)
	for _, k := range config.Keys() {
		_, leaf, _ := strings.Cut(k, ".")
		if leaf == "" {
			leaf = k
		}
		require.Contains(t, string(b), leaf+" =", "the example file documents %s", k)
	}
}
