package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/leakcheck"
	"github.com/wheelq/wheelq/internal/redistest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := leakcheck.Check("github.com/wheelq/wheelq"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// TestMonitoring places an order on a real redis-server, waits for its
// expiry job to run, and reads it in /metrics and the dashboard, all
// served on one port beside the application's handlers.
func TestMonitoring(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var out lockedBuffer
	exited := make(chan error, 1)
	go func() { exited <- run(ctx, srv.Client(t), l, 50*time.Millisecond, "secret", &out) }()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "serving on") }, 20*time.Second, 10*time.Millisecond)
	base := "http://" + l.Addr().String()

	do := func(method, path, user, pass string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, nil)
		require.NoError(t, err)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(b)
	}
	metrics := func() map[string]*dto.MetricFamily {
		t.Helper()
		code, body := do(http.MethodGet, "/metrics", "", "")
		require.Equal(t, http.StatusOK, code, body)
		p := expfmt.NewTextParser(model.UTF8Validation)
		mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
		require.NoError(t, err)
		return mfs
	}

	// The application's handlers.
	code, body := do(http.MethodPost, "/orders?id=42", "", "")
	require.Equal(t, http.StatusAccepted, code, body)
	code, body = do(http.MethodPost, "/orders?id=42", "", "")
	require.Equal(t, http.StatusConflict, code, body)
	code, body = do(http.MethodPost, "/orders", "", "")
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "order 42 expired") }, 20*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		code, body = do(http.MethodGet, "/healthz", "", "")
		return code == http.StatusOK
	}, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, "ok: running the jobs of 16 partitions\n", body, "the only process owns every partition")

	// /metrics: the run counted once, its lateness measured once (both
	// when the run starts, before the handler printed).
	mfs := metrics()
	require.Equal(t, 1.0, value(t, mfs, "wheelq_jobs_scheduled_total", "order.expire"))
	require.Equal(t, 1.0, value(t, mfs, "wheelq_jobs_started_total", "order.expire"))
	require.Equal(t, uint64(1), mfs["wheelq_job_lateness_seconds"].GetMetric()[0].GetHistogram().GetSampleCount())
	require.Eventually(t, func() bool {
		return value(t, metrics(), "wheelq_jobs_succeeded_total", "order.expire") == 1
	}, 20*time.Second, 10*time.Millisecond)

	// The dashboard, behind the application's authentication.
	code, body = do(http.MethodGet, "/wheelq/api/overview", "admin", "secret")
	require.Equal(t, http.StatusOK, code, body)
	var o struct {
		Title string
		Stats map[string]int64
	}
	require.NoError(t, json.Unmarshal([]byte(body), &o), body)
	require.Equal(t, "shop jobs", o.Title)
	require.Equal(t, int64(1), o.Stats["succeeded"], body)
	code, _ = do(http.MethodGet, "/wheelq/api/overview", "", "")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = do(http.MethodGet, "/wheelq/api/overview", "admin", "wrong")
	require.Equal(t, http.StatusUnauthorized, code)

	stop()
	require.NoError(t, <-exited)
}

// value returns the counter of family name for topic.
func value(t *testing.T, mfs map[string]*dto.MetricFamily, name, topic string) float64 {
	t.Helper()
	for _, m := range mfs[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "topic" && l.GetValue() == topic {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
