package wheelqprom_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq"
	wheelqprom "github.com/wheelq/wheelq/contrib/prometheus"
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

// scrape GETs url and parses the text exposition.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return mfs
}

// value returns the value of the metric of family name whose labels
// include want (a counter's, a gauge's, or a histogram's sample count).
func value(t *testing.T, mfs map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	mf, ok := mfs[name]
	require.True(t, ok, "no metric %s", name)
next:
	for _, m := range mf.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	t.Fatalf("no %s%v", name, want)
	return 0
}

// TestScrape runs jobs on a real redis-server and reads their metrics
// through a real /metrics endpoint (promhttp on a loopback server).
func TestScrape(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	m := wheelqprom.New(wheelqprom.Options{MaxTopics: 4})
	q, err := wheelq.New(rdb, wheelq.Config{Observer: m, Partitions: 4,
		Backoff: func(int, error) time.Duration { return time.Millisecond }})
	require.NoError(t, err)
	m.Watch(q)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	web := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer web.Close()

	ctx := context.Background()
	done := make(chan struct{}, 100)
	var flaky atomic.Int32
	require.NoError(t, q.Handle("ok", wheelq.HandlerFunc(func(context.Context, *wheelq.Job) error { done <- struct{}{}; return nil })))
	require.NoError(t, q.Handle("flaky", wheelq.HandlerFunc(func(context.Context, *wheelq.Job) error {
		if flaky.Add(1) < 3 {
			return errors.New("not yet")
		}
		done <- struct{}{}
		return nil
	})))
	require.NoError(t, q.Handle("bad", wheelq.HandlerFunc(func(context.Context, *wheelq.Job) error {
		done <- struct{}{}
		return wheelq.Permanent(errors.New("no"))
	})))
	require.NoError(t, q.Start(ctx))
	defer func() { require.NoError(t, q.Shutdown(ctx)) }()
	<-q.Ready()

	for i := range 10 {
		_, err := q.Schedule(ctx, "ok", nil, wheelq.ID(strconv.Itoa(i)))
		require.NoError(t, err)
	}
	_, err = q.Schedule(ctx, "flaky", nil)
	require.NoError(t, err)
	_, err = q.Schedule(ctx, "bad", nil)
	require.NoError(t, err)
	for i := range 3 { // two of them pending, one cancelled
		_, err = q.Schedule(ctx, "later", nil, wheelq.ID(strconv.Itoa(i)), wheelq.After(time.Hour))
		require.NoError(t, err)
	}
	require.NoError(t, q.Cancel(ctx, "later", "0"))
	// Topics past MaxTopics (4) are counted together.
	for _, topic := range []string{"e1", "e2"} {
		_, err = q.Schedule(ctx, topic, nil, wheelq.After(time.Hour))
		require.NoError(t, err)
	}
	for range 12 {
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("jobs did not run")
		}
	}
	require.Eventually(t, func() bool {
		s, err := q.Stats(ctx)
		return err == nil && s.UnstoredOutcomes == 0 && s.Running == 0 && s.Dead == 1
	}, 20*time.Second, 5*time.Millisecond, "outcomes stored")

	mfs := scrape(t, web.URL+"/metrics")
	for topic, want := range map[string]map[string]float64{
		"ok":                  {"scheduled": 10, "started": 10, "succeeded": 10},
		"flaky":               {"scheduled": 1, "started": 3, "succeeded": 1, "failed": 2, "retried": 2},
		"bad":                 {"scheduled": 1, "started": 1, "failed": 1, "dead": 1},
		"later":               {"scheduled": 3, "cancelled": 1},
		wheelqprom.OtherTopic: {"scheduled": 2},
	} {
		for _, kind := range []string{"scheduled", "started", "succeeded", "failed", "retried", "dead", "cancelled"} {
			require.Equal(t, want[kind], value(t, mfs, "wheelq_jobs_"+kind+"_total", map[string]string{"topic": topic}), "%s %s", topic, kind)
		}
	}
	require.NotContains(t, fmt.Sprint(mfs["wheelq_jobs_scheduled_total"]), `"e2"`, "a topic past MaxTopics has no series")
	require.Equal(t, 14.0, value(t, mfs, "wheelq_job_lateness_seconds", nil), "one lateness per run")
	require.Equal(t, 14.0, value(t, mfs, "wheelq_job_duration_seconds", nil), "one duration per run")
	lat := mfs["wheelq_job_lateness_seconds"].GetMetric()[0].GetHistogram()
	require.Equal(t, 10e-6, lat.GetBucket()[0].GetUpperBound(), "buckets down to 10µs")
	require.Equal(t, 4.0, value(t, mfs, "wheelq_jobs_pending", nil), "later 1 and 2, e1, e2")
	require.Equal(t, 1.0, value(t, mfs, "wheelq_jobs_dead", nil))
	require.Equal(t, 0.0, value(t, mfs, "wheelq_jobs_overdue", nil))
	require.Equal(t, 4.0, value(t, mfs, "wheelq_owned_partitions", nil))
	require.Equal(t, 0.0, value(t, mfs, "wheelq_jobs_running", nil))
	require.Equal(t, 0.0, value(t, mfs, "wheelq_unstored_outcomes", nil))
	require.Equal(t, 0.0, value(t, mfs, "wheelq_jobs_in_memory", nil), "the pending jobs are due past the horizon")
	require.Equal(t, 0.0, value(t, mfs, "wheelq_stats_errors_total", nil))
	// Round trips: every job written and claimed, every outcome stored.
	writes := mfs["wheelq_redis_batch_size"]
	var written, claimed float64
	for _, m := range writes.GetMetric() {
		switch m.GetLabel()[0].GetValue() {
		case "write":
			written = m.GetHistogram().GetSampleSum()
		case "claim":
			claimed = m.GetHistogram().GetSampleSum()
		}
	}
	require.Equal(t, 17.0, written, "jobs written")
	require.GreaterOrEqual(t, claimed, 14.0, "runs claimed")
	require.Positive(t, value(t, mfs, "wheelq_redis_round_trip_seconds", map[string]string{"op": "settle"}))
	require.Positive(t, value(t, mfs, "wheelq_redis_round_trip_seconds", map[string]string{"op": "census"}), "the scrape's Stats")

	// Redis gone: the namespace's gauges are left out, the failure counted,
	// the process's gauges still there.
	srv.Kill()
	mfs = scrape(t, web.URL+"/metrics")
	require.NotContains(t, mfs, "wheelq_jobs_pending")
	require.Equal(t, 1.0, value(t, mfs, "wheelq_stats_errors_total", nil))
	require.Contains(t, mfs, "wheelq_owned_partitions")
	require.Positive(t, value(t, mfs, "wheelq_redis_round_trip_errors_total", map[string]string{"op": "census"}))
	require.NoError(t, srv.Restart())
}

// TestCollectorLint: the metrics pass promtool's lint rules (names,
// units, help).
func TestCollectorLint(t *testing.T) {
	t.Parallel()
	m := wheelqprom.New(wheelqprom.Options{})
	m.JobScheduled("t")
	m.JobStarted("t", time.Millisecond)
	m.JobSucceeded("t", time.Millisecond)
	m.RoundTrip(wheelq.OpClaim, time.Millisecond, 3, nil)
	m.RoundTrip(wheelq.RoundTripOp(200), time.Millisecond, 3, nil) // unknown: ignored
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	require.NotEmpty(t, mfs)
	problems, err := testutil.CollectAndLint(m)
	require.NoError(t, err)
	require.Empty(t, problems)
}

// TestObserverAllocatesNothing: counting an event of a known topic and a
// round trip allocates nothing (they run on every job's path).
func TestObserverAllocatesNothing(t *testing.T) {
	m := wheelqprom.New(wheelqprom.Options{})
	topic := string([]byte("orders")) // not a constant
	m.JobStarted(topic, 0)
	allocs := testing.AllocsPerRun(1000, func() {
		m.JobStarted(topic, 3*time.Microsecond)
		m.JobSucceeded(topic, time.Millisecond)
		m.RoundTrip(wheelq.OpSettle, time.Millisecond, 17, nil)
	})
	require.Zero(t, allocs)
}

// TestThrottledGauge: jobs_throttled{topic} is, per limited topic, the
// jobs its Limit holds back in the process now.
func TestThrottledGauge(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	m := wheelqprom.New(wheelqprom.Options{})
	q, err := wheelq.New(rdb, wheelq.Config{Observer: m, Partitions: 4})
	require.NoError(t, err)
	m.Watch(q)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	web := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer web.Close()
	ctx := context.Background()
	release := make(chan struct{})
	require.NoError(t, q.Limit("slow", wheelq.Limit{Concurrency: 1}))
	require.NoError(t, q.Handle("slow", wheelq.HandlerFunc(func(ctx context.Context, _ *wheelq.Job) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})))
	require.NoError(t, q.Start(ctx))
	defer q.Shutdown(ctx)
	for range 3 {
		_, err := q.Schedule(ctx, "slow", nil)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		mfs := scrape(t, web.URL+"/metrics")
		_, ok := mfs["wheelq_jobs_throttled"]
		return ok && value(t, mfs, "wheelq_jobs_throttled", map[string]string{"topic": "slow"}) == 2
	}, 20*time.Second, 5*time.Millisecond)
	close(release)
	require.Eventually(t, func() bool {
		_, ok := scrape(t, web.URL+"/metrics")["wheelq_jobs_throttled"]
		return !ok
	}, 20*time.Second, 5*time.Millisecond, "no series once nothing is held back")
}
