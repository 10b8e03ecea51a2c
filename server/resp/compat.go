package resp

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"time"

	"github.com/tidwall/redcon"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/server/auth"
	"github.com/wheelq/wheelq/server/internal/runs"
)

// The delayedqueue compatibility mode (Options.DelayedQueue): the Redis
// set commands delayedqueue gave a meaning to, so that its users' programs
// run unchanged. A queue is a topic; it must be pulled (queue.pull).

// compatTable adds the compatibility commands to t.
func compatTable(t map[string]spec) {
	t["sadd"] = spec{-4, false, cmdSAdd, "SADD queue payload delay-ms [payload delay-ms ...] (delayedqueue mode)"}
	t["spop"] = spec{-2, false, cmdSPop, "SPOP queue [count] (delayedqueue mode: reserves and acks at once, at most once)"}
	t["keys"] = spec{-1, false, cmdKeys, "KEYS [pattern] (delayedqueue mode: the queues)"}
	t["scard"] = spec{2, false, cmdSCard, "SCARD queue (delayedqueue mode: its pending jobs)"}
	t["del"] = spec{-2, false, cmdDel, "DEL queue [queue ...] (delayedqueue mode: cancels every pending job)"}
}

// cmdSAdd schedules each payload after its delay; replies with how many.
// The SADDs pipelined right after it go to Redis with it and are
// answered in order.
func cmdSAdd(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	more := s.leading(c.PeekPipeline(), "sadd", wheelq.MaxBatchJobs-1)
	var cmds []redcon.Command
	if more > 0 {
		cmds = c.ReadPipeline()
		sess.began(cmds[:more]...)
	}
	all := pipelinedArgs(args, cmds[:more])
	// Each command's jobs, all commands' in one list: ScheduleBatch in as
	// few calls as it takes (no ids, so no order among them to keep).
	type sadd struct {
		err         error
		first, jobs int
	}
	adds := make([]sadd, len(all))
	var jobs []wheelq.BatchJob
	for k, a := range all {
		topic, pairs := string(a[0]), a[1:]
		ad := &adds[k]
		if len(pairs)%2 != 0 {
			ad.err = invalid("syntax error: SADD queue payload delay-ms [payload delay-ms ...]")
			continue
		}
		if ad.err = sess.p.Allow(auth.Produce, topic); ad.err != nil {
			continue
		}
		var js []wheelq.BatchJob
		for i := 0; i < len(pairs) && ad.err == nil; i += 2 {
			var n int64
			if n, ad.err = num(pairs[i+1], "delay", 0, maxMS); ad.err == nil {
				js = append(js, wheelq.BatchJob{Topic: topic, Payload: pairs[i], Options: []wheelq.Option{wheelq.After(time.Duration(n) * time.Millisecond)}})
			}
		}
		if ad.err == nil {
			ad.first, ad.jobs = len(jobs), len(js)
			jobs = append(jobs, js...)
		}
	}
	errs := make([]error, len(jobs))
	ctx, cancel := s.ctx()
	defer cancel()
	for _, r := range runs.Split(len(jobs), wheelq.MaxBatchJobs, func(int) string { return "" }) {
		res, err := s.q.ScheduleBatch(ctx, jobs[r[0]:r[1]])
		for i := range r[1] - r[0] {
			if err != nil {
				errs[r[0]+i] = err
			} else {
				errs[r[0]+i] = res[i].Err
			}
		}
	}
	for _, ad := range adds {
		// The first error stands for the command; its other jobs are
		// stored or not, each on its own.
		err := ad.err
		for _, e := range errs[ad.first : ad.first+ad.jobs] {
			if err == nil {
				err = e
			}
		}
		if err != nil {
			s.writeErr(c, err)
		} else {
			c.WriteInt(ad.jobs)
		}
	}
	for _, cmd := range cmds[more:] {
		s.serve(c, cmd)
	}
	return nil
}

// cmdSPop takes up to count due jobs of a queue and finishes them in the
// same Redis call, before the reply: at most once, as delayedqueue's. Without count it replies with a
// payload or a null, as Redis's SPOP; with one, an array (empty if none
// is due). It does not wait.
func cmdSPop(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	if len(args) > 2 {
		return invalid("syntax error: SPOP queue [count]")
	}
	topic := string(args[0])
	count := int64(1)
	if len(args) == 2 {
		var err error
		if count, err = num(args[1], "count", 0, wheelq.MaxReserve); err != nil {
			return err
		}
	}
	if err := sess.p.Allow(auth.Consume, topic); err != nil {
		return err
	}
	var got []wheelq.Job
	if count > 0 {
		ctx, cancel := s.ctx()
		defer cancel()
		var err error
		// Taken and finished in one Redis call (Queue.Pop): no job is
		// both replied and kept, nor kept by a reply that never arrives.
		got, err = s.q.Pop(ctx, []string{topic}, int(count))
		if errors.Is(err, wheelq.ErrPaused) {
			err = nil // a paused queue pops nothing, as delayedqueue's empty set
		}
		if err != nil {
			if len(got) == 0 {
				return err
			}
			s.opts.Logger.Warn("wheelq server: SPOP", "err", err, "jobs", len(got))
		}
	}
	if len(args) == 1 {
		if len(got) == 0 {
			sess.out(c).Null()
		} else {
			c.WriteBulk(got[0].Payload)
		}
	} else {
		c.WriteArray(len(got))
		for _, j := range got {
			c.WriteBulk(j.Payload)
		}
	}
	if len(got) > 0 {
		// Out now, not with the rest of a pipeline: the jobs are finished
		// already, and a reply left in the buffer when the connection
		// closes (a shutdown between two commands) would lose them.
		_ = redcon.BaseWriter(c).Flush()
	}
	return nil
}

// compatCounts is the counts of the topics the connection may see.
func (s *Server) compatCounts(sess *session) ([]wheelq.TopicCounts, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	cs, err := s.q.Counts(ctx)
	if err != nil {
		return nil, err
	}
	mine := cs[:0]
	for _, tc := range cs {
		if sess.p.AllowAny(tc.Topic, auth.Produce, auth.Consume, auth.Admin) == nil {
			mine = append(mine, tc)
		}
	}
	return mine, nil
}

// cmdKeys lists the queues (topics with jobs) matching pattern (a glob,
// as KEYS's; default "*").
func cmdKeys(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	if len(args) > 1 {
		return invalid("syntax error: KEYS [pattern]")
	}
	pattern := "*"
	if len(args) == 1 {
		pattern = string(args[0])
	}
	if _, err := path.Match(pattern, ""); err != nil {
		return invalid("bad pattern %q: %v", clip(args[0]), err)
	}
	cs, err := s.compatCounts(sess)
	if err != nil {
		return err
	}
	var names []string
	for _, tc := range cs {
		if ok, _ := path.Match(pattern, tc.Topic); ok && (tc.Pending > 0 || tc.Dead > 0) {
			names = append(names, tc.Topic)
		}
	}
	c.WriteArray(len(names))
	for _, n := range names {
		c.WriteBulkString(n)
	}
	return nil
}

// cmdSCard replies with a queue's pending jobs (due or not; reserved ones
// included).
func cmdSCard(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	topic := string(args[0])
	if err := sess.p.AllowAny(topic, auth.Produce, auth.Consume, auth.Admin); err != nil {
		return err
	}
	cs, err := s.compatCounts(sess)
	if err != nil {
		return err
	}
	var n int64
	if i := slices.IndexFunc(cs, func(tc wheelq.TopicCounts) bool { return tc.Topic == topic }); i >= 0 {
		n = cs[i].Pending
	}
	c.WriteInt64(n)
	return nil
}

// maxDelQueues is the most queues one DEL takes.
const maxDelQueues = 100

// cmdDel cancels every pending job of each queue (admin); replies with how
// many of the queues had any.
func cmdDel(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	if len(args) > maxDelQueues {
		// Each queue is a pass over the namespace: refused up front
		// rather than cut off by the command's timeout half done.
		return invalid("DEL takes at most %d queues a call, not %d", maxDelQueues, len(args))
	}
	for _, a := range args {
		// Every name checked before any queue is touched: "" is not
		// "every queue" (JobFilter's zero topic), and a bad name later
		// in the list leaves the earlier queues as they were.
		if err := wheelq.CheckTopic(string(a)); err != nil {
			return invalid("DEL %s: %v", clip(a), err)
		}
		if err := sess.p.Allow(auth.Admin, string(a)); err != nil {
			return err
		}
	}
	ctx, cancel := s.ctx()
	defer cancel()
	deleted := 0
	for _, a := range args {
		n, err := s.q.CancelWhere(ctx, wheelq.JobFilter{Topic: string(a)})
		if err != nil {
			return fmt.Errorf("DEL %s: cancelled %d jobs, then: %w", clip(a), n, err)
		}
		if n > 0 {
			deleted++
		}
	}
	c.WriteInt(deleted)
	return nil
}
