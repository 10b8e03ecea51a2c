package wheelq

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/batch"
	"github.com/wheelq/wheelq/internal/crashpoint"
	"github.com/wheelq/wheelq/internal/leakcheck"
	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/internal/recovery"
	"github.com/wheelq/wheelq/internal/redistest"
	"github.com/wheelq/wheelq/internal/runctx"
	"github.com/wheelq/wheelq/wheel"
)

const envLifecycleChild = "WHEELQ_TEST_LIFECYCLE_CHILD"

// TestNewStartsNoGoroutine: New starts nothing, so a queue made and never
// used needs no Shutdown; Shutdown of it is safe, and so is a second one.
// It runs in a child process of its own, where no other test's goroutines
// are counted.
func TestNewStartsNoGoroutine(t *testing.T) {
	t.Parallel()
	if os.Getenv(envLifecycleChild) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestNewStartsNoGoroutine$", "-test.count=1")
		cmd.Env = append(os.Environ(), envLifecycleChild+"=1")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "PASS")
		return
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // New does no I/O
	defer rdb.Close()
	before := leakcheck.Running("github.com/wheelq/wheelq")
	q, err := New(rdb, Config{})
	require.NoError(t, err)
	require.Equal(t, before, leakcheck.Running("github.com/wheelq/wheelq"), "New started a goroutine")
	require.NoError(t, q.Shutdown(context.Background()))
	require.NoError(t, q.Shutdown(context.Background()), "twice")
	require.Equal(t, before, leakcheck.Running("github.com/wheelq/wheelq"))
}

// TestConcurrentStartAndShutdown: Start and Shutdown called at once from
// several goroutines (as a signal handler may race a slow start) neither
// race nor hang, and leave nothing running (TestMain's leak check).
func TestConcurrentStartAndShutdown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	for range 5 {
		q, err := New(srv.Client(t), Config{})
		require.NoError(t, err)
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				err := q.Start(context.Background())
				if err != nil {
					require.ErrorIs(t, err, ErrClosed)
				}
			})
			wg.Go(func() { _ = q.Shutdown(context.Background()) })
		}
		wg.Wait()
		require.NoError(t, q.Shutdown(context.Background()))
		require.ErrorIs(t, q.Start(context.Background()), ErrClosed)
	}
}

// TestLifecycleShape: every background component of the engine has the
// same lifecycle (leakcheck.Lifecycle): Stop without Start, Stop twice,
// Start twice, Starts and Stops at once, Start after Stop; none hangs or
// leaves a goroutine behind. The batchers start lazily, with their first
// request; the recoverer is started and stopped by the Queue's Start and
// Shutdown (and has tests of its own in internal/recovery). Not
// parallel: it counts goroutines.
func TestLifecycleShape(t *testing.T) {
	const pkg = "github.com/wheelq/wheelq"
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	cases := map[string]func() (start, stop func()){
		"Queue": func() (func(), func()) {
			q, err := New(srv.Client(t), Config{Partitions: 2})
			require.NoError(t, err)
			return func() {
					if err := q.Start(ctx); err != nil {
						require.ErrorIs(t, err, ErrClosed)
					}
				}, func() {
					require.NoError(t, q.Shutdown(ctx))
				}
		},
		"wheel.Scheduler": func() (func(), func()) {
			s, err := wheel.NewScheduler(wheel.SchedulerConfig{}, func([]wheel.Fired) {})
			require.NoError(t, err)
			return func() {
				s.Start()
				_, _ = s.Add("x", time.Now().Add(time.Hour)) // the sleeper's reader starts with the first sleep
			}, s.Stop
		},
		"runctx.Set": func() (func(), func()) {
			r := runctx.New(2, time.Hour, false)
			return func() {
				r.Start()
				s := r.Slot(0)
				c := s.Begin()
				s.Finish(c.Gen())
			}, r.Stop
		},
		"batch.Batcher": func() (func(), func()) {
			b := batch.NewBatcher(batch.Config{Linger: time.Millisecond}, func(_ context.Context, reqs []int) ([]int, error) { return reqs, nil })
			return func() {
				var wg sync.WaitGroup
				for i := range 4 { // more than one: the flushers start
					wg.Go(func() {
						if _, err := b.Do(ctx, i); err != nil {
							require.ErrorIs(t, err, batch.ErrClosed)
						}
					})
				}
				wg.Wait()
			}, b.Stop
		},
		"batch.Retrier": func() (func(), func()) {
			r := batch.NewRetrier(batch.Config{}, func(context.Context, []int) error { return nil }, nil)
			return func() {
					if err := r.Add(1); err != nil {
						require.ErrorIs(t, err, batch.ErrClosed)
					}
				}, func() {
					require.NoError(t, r.Stop(ctx))
				}
		},
	}
	if runtime.GOOS == "linux" && runtime.GOMAXPROCS(0) >= 2 {
		// Two runners, one on a locked thread in a blocking read.
		cases["wheel.Scheduler with Backup"] = func() (func(), func()) {
			s, err := wheel.NewScheduler(wheel.SchedulerConfig{Backup: true}, func([]wheel.Fired) {})
			require.NoError(t, err)
			return func() {
				s.Start()
				_, _ = s.Add("x", time.Now().Add(time.Hour))
			}, s.Stop
		}
	}
	for name, newComponent := range cases {
		t.Run(name, func(t *testing.T) { leakcheck.Lifecycle(t, pkg, newComponent) })
	}
}

// TestCrashStoreKeepsRosterWatch: the store of a queue with Config.Testing
// still watches the roster (it hid the method: roster changes were seen
// by polling only), and a dead queue's watch ends at once.
func TestCrashStoreKeepsRosterWatch(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	st, err := persist.New(srv.Client(t), persist.Options{Namespace: "cw", Partitions: 2})
	require.NoError(t, err)
	h := crashpoint.New(func(crashpoint.Point, string) bool { return false }, nil)
	w, ok := newCrashStore(st, h).(recovery.RosterWatcher)
	require.True(t, ok, "the crash store watches the roster")
	h.MarkDead()
	require.ErrorIs(t, w.WatchRoster(context.Background(), func() {}), crashpoint.ErrCrashed)
}

// slowInitStore blocks the namespace's check (the first of Start's round
// trips) until released.
type slowInitStore struct {
	engineStore
	entered chan struct{} // closed when Init is called
	release chan struct{} // Init returns once this is closed
}

func (s *slowInitStore) Init(ctx context.Context) error {
	close(s.entered)
	<-s.release
	return s.engineStore.Init(ctx)
}

// TestHandleDuringSlowStart: Start holds no lock that Handle needs across
// its round trips, so a Handle while Redis is slow to answer Start returns
// at once; a Pull then is refused (the topics' modes are being declared),
// and Start, once Redis answers, starts the queue with the handler.
func TestHandleDuringSlowStart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	slow := &slowInitStore{entered: make(chan struct{}), release: make(chan struct{})}
	q, err := New(srv.Client(t), Config{Partitions: 2, test: testHooks{wrapStore: func(s engineStore) engineStore {
		slow.engineStore = s
		return slow
	}}})
	require.NoError(t, err)
	started := make(chan error, 1)
	go func() { started <- q.Start(context.Background()) }()
	<-slow.entered

	handled := make(chan error, 1)
	ran := make(chan string, 1)
	go func() {
		handled <- q.Handle("mail", HandlerFunc(func(_ context.Context, j *Job) error { ran <- j.ID; return nil }))
	}()
	select {
	case err := <-handled:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		close(slow.release)
		t.Fatal("Handle waited for Start's round trip")
	}
	require.ErrorIs(t, q.Pull("other"), ErrInvalidConfig, "Pull once Start began")
	select {
	case err := <-started:
		t.Fatalf("Start returned before its round trip was answered: %v", err)
	default:
	}
	close(slow.release)
	require.NoError(t, <-started)
	_, err = q.Schedule(context.Background(), "mail", nil, ID("a"))
	require.NoError(t, err)
	select {
	case id := <-ran:
		require.Equal(t, "a", id)
	case <-time.After(10 * time.Second):
		t.Fatal("the handler registered during Start did not run")
	}
	require.NoError(t, q.Shutdown(context.Background()))
}
