// Package wheelqprom exports a wheelq queue's metrics to Prometheus. It is
// a module of its own (github.com/wheelq/wheelq/contrib/prometheus), so
// that the Prometheus client stays out of the queue's dependencies.
//
// A Collector is both the queue's wheelq.Observer (it counts the events
// the queue tells it of) and a prometheus.Collector (it hands them to
// Prometheus, with gauges read from Queue.Stats at scrape time):
//
//	m := wheelqprom.New(wheelqprom.Options{})
//	q, err := wheelq.New(rdb, wheelq.Config{Observer: m})
//	m.Watch(q); prometheus.MustRegister(m)
//
// # Metrics
//
// Counters, per topic (label topic):
//
//	wheelq_jobs_scheduled_total   jobs stored by Schedule
//	wheelq_jobs_started_total     runs started
//	wheelq_jobs_succeeded_total   runs whose handler returned nil
//	wheelq_jobs_failed_total      runs whose handler returned an error or panicked
//	wheelq_jobs_retried_total     failed runs whose job runs again
//	wheelq_jobs_dead_total        jobs dead-lettered (failed runs, corrupt records)
//	wheelq_jobs_cancelled_total   jobs deleted by Cancel
//
// Histograms: wheelq_job_lateness_seconds (how late runs start after
// their due time; buckets from 10µs to 1 minute), wheelq_job_duration_seconds
// (handler run time), and per round-trip kind (label op: write, cancel,
// reschedule, claim, settle, poll, lease, range, census, dead_letter)
// wheelq_redis_round_trip_seconds and wheelq_redis_batch_size (requests
// carried per round trip); wheelq_redis_round_trip_errors_total counts
// the failed ones.
//
// Gauges, read from Queue.Stats when Prometheus scrapes: of this process,
// wheelq_jobs_in_memory, wheelq_jobs_running, wheelq_unstored_outcomes,
// wheelq_owned_partitions and wheelq_members; of the whole namespace, read
// from Redis (every process of the namespace reports the same figures:
// aggregate them with max, not sum), wheelq_jobs_pending,
// wheelq_jobs_overdue, wheelq_jobs_dead and wheelq_oldest_overdue_seconds.
// A scrape costs one pipelined Redis round trip (four O(log n) commands
// per partition: 64 with the default 16 partitions), bounded by
// Options.StatsTimeout; when it fails, the namespace's gauges are left
// out of that scrape, wheelq_stats_errors_total counts the failure, and
// the process's gauges are still reported.
//
// # Cardinality
//
// Each topic makes 7 counter series. Topics are meant to be the
// application's own fixed set (one per kind of job, not per customer or
// per job); as a guard against a topic made of data, the first
// Options.MaxTopics topics seen (default 100) get their own label value
// and the events of any later one are counted under topic="_other". The
// histograms have no topic label: lateness and handler time are measured
// across topics, and the Redis ones have a series per op.
package wheelqprom

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wheelq/wheelq"
)

// OtherTopic is the topic label of the events of topics past
// Options.MaxTopics.
const OtherTopic = "_other"

// Options configures a Collector. A zero field means its default.
type Options struct {
	// Namespace is the metrics' name prefix. Default "wheelq".
	Namespace string
	// ConstLabels are added to every metric: set one (say queue="orders")
	// to register collectors of several queues in one registry.
	ConstLabels prometheus.Labels
	// MaxTopics is how many topics get a label value of their own; the
	// events of later ones are counted under OtherTopic. Default 100.
	MaxTopics int
	// StatsTimeout bounds the Stats call of a scrape (its Redis round
	// trip). Default 2s.
	StatsTimeout time.Duration
}

// StatsSource is what a Collector reads its gauges from: a *wheelq.Queue.
type StatsSource interface {
	Stats(ctx context.Context) (wheelq.Stats, error)
}

// Collector counts a queue's events (as its wheelq.Observer) and exports
// them, with gauges from the queue's Stats, as a prometheus.Collector. It
// is safe for concurrent use. Make one with New.
type Collector struct {
	wheelq.NopObserver // methods added to Observer later do nothing

	opts Options

	scheduled, started, succeeded, failed, retried, dead, cancelled *prometheus.CounterVec

	lateness, duration *prometheus.HistogramVec // no labels: one series each
	late, took         prometheus.Observer

	tripSeconds, tripBatch *prometheus.HistogramVec
	tripErrors             *prometheus.CounterVec
	// ops holds, per wheelq.RoundTripOp, its series (resolved up front).
	ops [16]opSeries

	statsErrors prometheus.Counter
	gauges      []gauge
	throttled   *prometheus.Desc // jobs_throttled{topic}: Stats.ThrottledNow

	mu     sync.RWMutex
	topics map[string]*topicSeries // guarded by mu
	other  *topicSeries            // guarded by mu; made by the first topic past MaxTopics
	src    StatsSource             // guarded by mu
}

type topicSeries struct {
	scheduled, started, succeeded, failed, retried, dead, cancelled prometheus.Counter
}

type opSeries struct {
	seconds, batch prometheus.Observer
	errors         prometheus.Counter
}

// gauge is a gauge read from Stats: local ones are reported even when
// Stats failed (it still gives this process's figures).
type gauge struct {
	desc  *prometheus.Desc
	local bool
	value func(s *wheelq.Stats) float64
}

var _ wheelq.Observer = (*Collector)(nil)
var _ prometheus.Collector = (*Collector)(nil)

// LatenessBuckets are the bounds of wheelq_job_lateness_seconds: from 10µs
// (a job normally starts within a millisecond of its due time) to a
// minute.
var LatenessBuckets = []float64{10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 10, 60}

// DurationBuckets are the bounds of wheelq_job_duration_seconds.
var DurationBuckets = []float64{100e-6, 1e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 10, 60}

// RoundTripBuckets are the bounds of wheelq_redis_round_trip_seconds.
var RoundTripBuckets = []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1, 5}

// BatchBuckets are the bounds of wheelq_redis_batch_size.
var BatchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}

// New returns a Collector. Give it to the queue as Config.Observer, tell it
// the queue with Watch, and register it.
func New(opts Options) *Collector {
	if opts.Namespace == "" {
		opts.Namespace = "wheelq"
	}
	if opts.MaxTopics <= 0 {
		opts.MaxTopics = 100
	}
	if opts.StatsTimeout <= 0 {
		opts.StatsTimeout = 2 * time.Second
	}
	ns, cl := opts.Namespace, opts.ConstLabels
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help, ConstLabels: cl}, []string{"topic"})
	}
	c := &Collector{
		opts:      opts,
		topics:    map[string]*topicSeries{},
		scheduled: counter("jobs_scheduled_total", "Jobs stored by Schedule."),
		started:   counter("jobs_started_total", "Runs of jobs started."),
		succeeded: counter("jobs_succeeded_total", "Runs whose handler returned nil."),
		failed:    counter("jobs_failed_total", "Runs whose handler returned an error or panicked."),
		retried:   counter("jobs_retried_total", "Failed runs whose job runs again."),
		dead:      counter("jobs_dead_total", "Jobs dead-lettered."),
		cancelled: counter("jobs_cancelled_total", "Jobs deleted by Cancel."),
		lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "job_lateness_seconds",
			Help: "How late runs started after their due time.", Buckets: LatenessBuckets, ConstLabels: cl}, nil),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "job_duration_seconds",
			Help: "How long handlers ran.", Buckets: DurationBuckets, ConstLabels: cl}, nil),
		tripSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "redis_round_trip_seconds",
			Help: "Duration of the queue's Redis round trips, by kind.", Buckets: RoundTripBuckets, ConstLabels: cl}, []string{"op"}),
		tripBatch: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "redis_batch_size",
			Help: "Requests (jobs, outcomes) carried per Redis round trip, by kind.", Buckets: BatchBuckets, ConstLabels: cl}, []string{"op"}),
		tripErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "redis_round_trip_errors_total",
			Help: "Redis round trips that failed, by kind.", ConstLabels: cl}, []string{"op"}),
		statsErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "stats_errors_total",
			Help: "Scrapes whose read of the namespace's counts from Redis failed.", ConstLabels: cl}),
	}
	c.late, c.took = c.lateness.WithLabelValues(), c.duration.WithLabelValues()
	for _, op := range wheelq.RoundTripOps {
		name := op.String()
		c.ops[op] = opSeries{seconds: c.tripSeconds.WithLabelValues(name), batch: c.tripBatch.WithLabelValues(name),
			errors: c.tripErrors.WithLabelValues(name)}
	}
	g := func(name, help string, local bool, value func(s *wheelq.Stats) float64) {
		c.gauges = append(c.gauges, gauge{desc: prometheus.NewDesc(prometheus.BuildFQName(ns, "", name), help, nil, cl),
			local: local, value: value})
	}
	c.throttled = prometheus.NewDesc(prometheus.BuildFQName(ns, "", "jobs_throttled"),
		"Jobs of a limited topic held back by its Limit in this process now (waiting for a permit or for their start in the rate).", []string{"topic"}, cl)
	g("jobs_in_memory", "Jobs held in this process's memory (armed, or claimed and waiting for their time).", true,
		func(s *wheelq.Stats) float64 { return float64(s.InMemory) })
	g("jobs_running", "Handlers running in this process.", true, func(s *wheelq.Stats) float64 { return float64(s.Running) })
	g("unstored_outcomes", "Outcomes of runs waiting to be stored in Redis (non-zero while Redis is unreachable).", true,
		func(s *wheelq.Stats) float64 { return float64(s.UnstoredOutcomes) })
	g("owned_partitions", "Partitions whose jobs this process runs.", true,
		func(s *wheelq.Stats) float64 { return float64(s.OwnedPartitions) })
	g("members", "Live started processes of the namespace, by the roster as this process last read it.", true,
		func(s *wheelq.Stats) float64 { return float64(s.Members) })
	g("jobs_pending", "Pending jobs in Redis, over the whole namespace.", false,
		func(s *wheelq.Stats) float64 { return float64(s.Pending) })
	g("jobs_overdue", "Pending jobs more than a second past their due time, over the whole namespace.", false,
		func(s *wheelq.Stats) float64 { return float64(s.Overdue) })
	g("jobs_dead", "Dead-lettered jobs in Redis, over the whole namespace.", false,
		func(s *wheelq.Stats) float64 { return float64(s.Dead) })
	g("oldest_overdue_seconds", "How far past its due time the oldest overdue job is (0 when none is).", false,
		func(s *wheelq.Stats) float64 { return s.OldestOverdue.Seconds() })
	return c
}

func (c *Collector) newTopic(topic string) *topicSeries {
	return &topicSeries{
		scheduled: c.scheduled.WithLabelValues(topic), started: c.started.WithLabelValues(topic),
		succeeded: c.succeeded.WithLabelValues(topic), failed: c.failed.WithLabelValues(topic),
		retried: c.retried.WithLabelValues(topic), dead: c.dead.WithLabelValues(topic),
		cancelled: c.cancelled.WithLabelValues(topic),
	}
}

// Watch sets the queue whose Stats the gauges are read from at each
// scrape. Before Watch (or with nil) the collector exports its counters
// and histograms only.
func (c *Collector) Watch(q StatsSource) {
	c.mu.Lock()
	c.src = q
	c.mu.Unlock()
}

// topic returns the series of topic, making them for a new topic while
// fewer than MaxTopics have been seen. A topic seen before costs a read
// lock and a map lookup.
func (c *Collector) topic(topic string) *topicSeries {
	c.mu.RLock()
	s, ok := c.topics[topic]
	c.mu.RUnlock()
	if ok {
		return s
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.topics[topic]; ok {
		return s
	}
	if len(c.topics) >= c.opts.MaxTopics {
		if c.other == nil {
			c.other = c.newTopic(OtherTopic)
		}
		return c.other
	}
	s = c.newTopic(topic)
	c.topics[topic] = s
	return s
}

// JobScheduled counts a job stored.
func (c *Collector) JobScheduled(topic string) { c.topic(topic).scheduled.Inc() }

// JobStarted counts a run started and observes its lateness.
func (c *Collector) JobStarted(topic string, lateness time.Duration) {
	c.topic(topic).started.Inc()
	c.late.Observe(lateness.Seconds())
}

// JobSucceeded counts a run that succeeded and observes its duration.
func (c *Collector) JobSucceeded(topic string, took time.Duration) {
	c.topic(topic).succeeded.Inc()
	c.took.Observe(took.Seconds())
}

// JobFailed counts a run that failed and observes its duration.
func (c *Collector) JobFailed(topic string, took time.Duration, _ error) {
	c.topic(topic).failed.Inc()
	c.took.Observe(took.Seconds())
}

// JobRetried counts a failed run whose job runs again.
func (c *Collector) JobRetried(topic string, _ time.Duration) { c.topic(topic).retried.Inc() }

// JobDead counts a job dead-lettered.
func (c *Collector) JobDead(topic string) { c.topic(topic).dead.Inc() }

// JobCancelled counts a job cancelled.
func (c *Collector) JobCancelled(topic string) { c.topic(topic).cancelled.Inc() }

// RoundTrip observes a Redis round trip's duration and batch size, or
// counts its failure.
func (c *Collector) RoundTrip(op wheelq.RoundTripOp, took time.Duration, batch int, err error) {
	if int(op) >= len(c.ops) || c.ops[op].seconds == nil {
		return // an op of a later wheelq than this collector knows
	}
	s := &c.ops[op]
	if err != nil {
		s.errors.Inc()
		return
	}
	s.seconds.Observe(took.Seconds())
	s.batch.Observe(float64(batch))
}

// Describe sends the descriptors of every metric.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, v := range c.vecs() {
		v.Describe(ch)
	}
	c.statsErrors.Describe(ch)
	for _, g := range c.gauges {
		ch <- g.desc
	}
	ch <- c.throttled
}

// Collect sends the metrics: the counters and histograms, and the gauges
// read from the watched queue's Stats (one Redis round trip, bounded by
// StatsTimeout).
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.RLock()
	src := c.src
	c.mu.RUnlock()
	if src != nil {
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.StatsTimeout)
		s, err := src.Stats(ctx)
		cancel()
		if err != nil && !errors.Is(err, wheelq.ErrClosed) {
			c.statsErrors.Inc()
		}
		for _, g := range c.gauges {
			if err == nil || g.local {
				ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, g.value(&s))
			}
		}
		for topic, n := range s.ThrottledNow {
			ch <- prometheus.MustNewConstMetric(c.throttled, prometheus.GaugeValue, float64(n), topic)
		}
	}
	for _, v := range c.vecs() {
		v.Collect(ch)
	}
	c.statsErrors.Collect(ch)
}

func (c *Collector) vecs() []prometheus.Collector {
	return []prometheus.Collector{c.scheduled, c.started, c.succeeded, c.failed, c.retried, c.dead, c.cancelled,
		c.lateness, c.duration, c.tripSeconds, c.tripBatch, c.tripErrors}
}
