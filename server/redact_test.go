package server_test

import (
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
)

// TestServerPushURLMasked: the values of a push URL's query (a receiver
// that takes its token there) are never printed, only their keys: not in
// the log of a failed push, not in the job's last error (the API's and
// the dashboard's), not by -print-config, not in -check-config's
// refusal of a bad URL.
func TestServerPushURLMasked(t *testing.T) {
	const secret = "s3cr3tT0ken"
	rs := redistest.Start(t, redistest.Options{})
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("token") != secret {
			t.Errorf("the receiver got %q: the real URL is not what is pushed to", r.URL)
		}
		http.Error(w, "down", http.StatusBadGateway)
	}))
	defer recv.Close()
	conf := func(url string) string {
		return fmt.Sprintf(`
[queue]
max_attempts = 2
[push]
allow_hosts = [%q]
[[push.topic]]
topic = "hooks"
url = %q
secret = "whsec_%s"
timeout = "5s"
`, strings.TrimPrefix(recv.URL, "http://"), url, base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef")))
	}
	cfg := writeFile(t, "wheelq-server.toml", conf(recv.URL+"/in?token="+secret+"&tenant=acme"))
	p := startServer(t, nil, "-config", cfg, "-addr", "127.0.0.1:0", "-redis-url", redisURL(rs), "-set", "log.access=false")
	require.Equal(t, 201, call(t, "POST", p.URL+"/v1/jobs/hooks", "", map[string]any{"id": "h1", "payload": "x"}, nil))

	// Both attempts fail (the second after the queue's backoff, about 1 s):
	// the job is dead, its last error the second push's.
	var info map[string]any
	waitFor(t, func() bool {
		info = nil
		require.Equal(t, 200, call(t, "GET", p.URL+"/v1/jobs/hooks/h1", "", nil, &info))
		return info["state"] == "dead"
	})
	lastErr, _ := info["last_error"].(string)
	require.Contains(t, lastErr, "/in?")
	require.NotContains(t, lastErr, secret)
	require.Contains(t, lastErr, "token=xxxxx", "the key stays, to say which URL")
	waitFor(t, func() bool { return strings.Contains(p.Log(), "job dead-lettered") })
	require.Contains(t, p.Log(), "token=xxxxx")
	require.NotContains(t, p.Log(), secret, "the log")

	resp, err := http.Get(p.URL + "/ui/api/job?topic=hooks&id=h1")
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	require.Contains(t, string(b), "token=xxxxx")
	require.NotContains(t, string(b), secret, "the dashboard")

	out, err := exec.Command(binary, "-print-config", "-config", cfg).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.NotContains(t, string(out), secret, "-print-config")
	require.Contains(t, string(out), "token=xxxxx")

	for _, bad := range []string{"ftp://" + strings.TrimPrefix(recv.URL, "http://") + "/in?token=" + secret, "http://ops:" + secret + "@" + strings.TrimPrefix(recv.URL, "http://") + "/in?token=" + secret} {
		out, err = exec.Command(binary, "-check-config", "-config", writeFile(t, "bad.toml", conf(bad))).CombinedOutput()
		require.Error(t, err, "%s", out)
		require.Contains(t, string(out), "push.topic[0].url")
		require.NotContains(t, string(out), secret, "-check-config")
	}
}
