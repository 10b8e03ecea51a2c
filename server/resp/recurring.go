package resp

// Recurring schedules over RESP: WQ.RECUR declares one, WQ.RECURS lists
// them, WQ.UNRECUR removes one (Queue.DeclareRecurring, Recurrings,
// RemoveRecurring), with the produce right on the schedule's topic.

import (
	"strings"
	"time"

	"github.com/tidwall/redcon"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/server/auth"
	"github.com/wheelq/wheelq/server/internal/recurs"
)

// ParseRecur parses WQ.RECUR's arguments (after the command's name):
// name topic, then EVERY ms or CRON expression, and the options TZ zone,
// PAYLOAD bytes, MAXATTEMPTS n, START unix-ms, END unix-ms, MISSED
// latest|skip|each, MAXMISSED n, HEADER name value (repeatable). A
// refusal is an Invalid error.
func ParseRecur(args [][]byte) (wheelq.Recurring, error) {
	if len(args) < 2 {
		return wheelq.Recurring{}, invalid("wrong number of arguments for 'wq.recur' command")
	}
	r := wheelq.Recurring{Name: string(args[0]), Topic: string(args[1])}
	var h map[string]string
	seen := map[string]bool{}
	for i := 2; i < len(args); i++ {
		opt := strings.ToUpper(string(args[i]))
		need := 1
		switch opt {
		case "HEADER":
			need = 2
		case "EVERY", "CRON", "TZ", "PAYLOAD", "MAXATTEMPTS", "START", "END", "MISSED", "MAXMISSED":
		default:
			return r, invalid("syntax error: unknown option '%s' (EVERY, CRON, TZ, PAYLOAD, MAXATTEMPTS, START, END, MISSED, MAXMISSED, HEADER)", clip(args[i]))
		}
		if err := once(seen, opt, args, i); err != nil {
			return r, err
		}
		if i+need >= len(args) {
			return r, invalid("syntax error: %s needs %d argument(s)", opt, need)
		}
		v := args[i+1]
		switch opt {
		case "EVERY":
			n, err := num(v, "EVERY", 1, maxMS)
			if err != nil {
				return r, err
			}
			r.Every = time.Duration(n) * time.Millisecond
		case "CRON":
			r.Cron = string(v)
		case "TZ":
			r.TimeZone = string(v)
		case "PAYLOAD":
			r.Payload = v
		case "MAXATTEMPTS":
			n, err := num(v, "MAXATTEMPTS", 1, 1<<31-1)
			if err != nil {
				return r, err
			}
			r.MaxAttempts = int(n)
		case "START", "END":
			n, err := num(v, opt, 0, 1<<50)
			if err != nil {
				return r, err
			}
			if opt == "START" {
				r.Start = time.UnixMilli(n)
			} else {
				r.End = time.UnixMilli(n)
			}
		case "MISSED":
			switch strings.ToLower(string(v)) {
			case "latest":
				r.Missed = wheelq.MissedLatest
			case "skip":
				r.Missed = wheelq.MissedSkip
			case "each":
				r.Missed = wheelq.MissedEach
			default:
				return r, invalid("MISSED %q: want latest, skip or each", clip(v))
			}
		case "MAXMISSED":
			n, err := num(v, "MAXMISSED", 1, 1000)
			if err != nil {
				return r, err
			}
			r.MaxMissed = int(n)
		case "HEADER":
			if h == nil {
				h = map[string]string{}
			}
			h[string(v)] = string(args[i+2])
		}
		i += need
	}
	r.Headers = h
	return r, nil
}

func cmdRecur(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	r, err := ParseRecur(args)
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx()
	defer cancel()
	if err := recurs.Declare(ctx, s.q, sess.p, r); err != nil {
		return err
	}
	c.WriteString("OK")
	return nil
}

// cmdRecurs lists the schedules the session may see: per schedule an
// array of name, topic, when (the cron expression, or "every " and the
// interval as Go writes it: "every 1m0s"), the
// next slot (unix ms, 0 if none), the latest slot stored (unix ms, 0 if
// none) and the state of the latest slot's job whose time came ("" if
// none).
func cmdRecurs(s *Server, c redcon.Conn, sess *session, _ [][]byte) error {
	ctx, cancel := s.ctx()
	defer cancel()
	all, err := s.q.Recurrings(ctx)
	if err != nil {
		return err
	}
	var mine []wheelq.RecurringInfo
	for _, ri := range all {
		if sess.p.AllowAny(ri.Topic, auth.Produce, auth.Admin) == nil {
			mine = append(mine, ri)
		}
	}
	c.WriteArray(len(mine))
	for _, ri := range mine {
		when := ri.Cron
		if ri.Every > 0 {
			when = "every " + ri.Every.String()
		}
		if ri.TimeZone != "" {
			when += " " + ri.TimeZone
		}
		var next time.Time
		if len(ri.Next) > 0 {
			next = ri.Next[0]
		}
		last := ""
		if ri.Last != nil {
			last = ri.Last.State.String()
		}
		c.WriteArray(6)
		c.WriteBulkString(ri.Name)
		c.WriteBulkString(ri.Topic)
		c.WriteBulkString(when)
		c.WriteInt64(ms(next))
		c.WriteInt64(ms(ri.Stored))
		c.WriteBulkString(last)
	}
	return nil
}

func cmdUnrecur(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	ctx, cancel := s.ctx()
	defer cancel()
	if err := recurs.Remove(ctx, s.q, sess.p, string(args[0])); err != nil {
		return err
	}
	c.WriteInt(1)
	return nil
}
