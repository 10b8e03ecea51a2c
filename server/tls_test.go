package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
	"github.com/wheelq/wheelq/server/auth"
)

// writeCert writes a self-signed certificate for 127.0.0.1 with serial
// to certFile and keyFile.
func writeCert(t *testing.T, serial int64, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "wheelq test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kb, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600))
}

// servedSerial is the serial of the certificate a new connection to url
// is shown.
func servedSerial(t *testing.T, url string) int64 {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}}
	resp, err := c.Get(url + "/healthz")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	return resp.TLS.PeerCertificates[0].SerialNumber.Int64()
}

// TestServerTLSReload: with TLS and tokens, on HTTP and RESP alike,
// SIGHUP swaps the certificate for new connections and re-reads the
// tokens; a reload with a broken certificate keeps the one in use.
func TestServerTLSReload(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeCert(t, 1, certFile, keyFile)
	tok1, sum1, err := auth.Generate("one")
	require.NoError(t, err)
	tok2, sum2, err := auth.Generate("two")
	require.NoError(t, err)
	tokens := filepath.Join(dir, "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte("one "+sum1+" admin=*\n"), 0o600))
	cfg := filepath.Join(dir, "wheelq-server.toml")
	require.NoError(t, os.WriteFile(cfg, []byte(`token_file = "`+tokens+`"
[http]
tls_cert = "`+certFile+`"
tls_key = "`+keyFile+`"
[resp]
addr = "127.0.0.1:0"
`), 0o600))
	p := startServerTLS(t, cfg, redisURL(rs), "-pull", "tls")
	require.EqualValues(t, 1, servedSerial(t, p.URL))
	respAt := respAddr(t, p)
	// The RESP front end speaks TLS with the same certificate and tokens:
	// a plain connection gets nothing it can read as RESP; go-redis over
	// TLS authenticates, schedules, reserves with a block and acks.
	plain, err := net.DialTimeout("tcp", respAt, 5*time.Second)
	require.NoError(t, err)
	require.NoError(t, plain.SetDeadline(time.Now().Add(5*time.Second)))
	_, _ = plain.Write([]byte("PING\r\n"))
	got, _ := io.ReadAll(plain)
	plain.Close()
	require.NotContains(t, string(got), "PONG", "no plain RESP on a TLS port")
	respClient := func(tok string) *redis.Client {
		return redis.NewClient(&redis.Options{Addr: respAt, Password: tok, MaxRetries: -1,
			TLSConfig: &tls.Config{InsecureSkipVerify: true}})
	}
	ctx := context.Background()
	r1 := respClient(tok1)
	defer r1.Close()
	id, err := r1.Do(ctx, "WQ.SCHEDULE", "tls", "over tls", "DELAY", 100).Text()
	require.NoError(t, err)
	res, err := r1.Do(ctx, "WQ.RESERVE", "BLOCK", 10000, "TOPICS", "tls").Slice()
	require.NoError(t, err)
	job := res[0].([]any)
	require.Equal(t, []any{id, "over tls"}, []any{job[1], job[3]})
	require.NoError(t, r1.Do(ctx, "WQ.ACK", "tls", id, job[2]).Err())
	respSerial := func() int64 {
		c, err := tls.Dial("tcp", respAt, &tls.Config{InsecureSkipVerify: true})
		require.NoError(t, err)
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	require.EqualValues(t, 1, respSerial())
	authed := func(tok string) int {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		req, _ := http.NewRequest("GET", p.URL+"/v1/counts", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := c.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, 200, authed(tok1))
	require.Equal(t, 401, authed(tok2))

	writeCert(t, 2, certFile, keyFile)
	require.NoError(t, os.WriteFile(tokens, []byte("two "+sum2+" admin=*\n"), 0o600))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	waitFor(t, func() bool { return servedSerial(t, p.URL) == 2 })
	require.Equal(t, 401, authed(tok1), "a revoked token is refused at once")
	require.Equal(t, 200, authed(tok2))
	require.EqualValues(t, 2, respSerial(), "RESP shows the new certificate too")
	require.ErrorContains(t, r1.Do(ctx, "WQ.COUNTS").Err(), "NOAUTH", "the revoked token on an open RESP connection")
	r2 := respClient(tok2)
	defer r2.Close()
	require.NoError(t, r2.Do(ctx, "WQ.COUNTS").Err())

	require.NoError(t, os.WriteFile(certFile, []byte("not a certificate"), 0o600))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	waitFor(t, func() bool { return strings.Contains(p.Log(), "reload refused") })
	require.EqualValues(t, 2, servedSerial(t, p.URL), "the certificate in use is kept")
	require.Equal(t, 200, authed(tok2))
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !ok() {
		require.True(t, time.Now().Before(deadline), "not within %v", wait)
		time.Sleep(20 * time.Millisecond)
	}
}

// startServerTLS starts a TLS server (its readiness checked over TLS).
func startServerTLS(t *testing.T, cfg, redis string, args ...string) *proc {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	return startServerWith(t, c, nil, append([]string{"-config", cfg, "-addr", "127.0.0.1:0", "-redis-url", redis}, args...)...)
}
