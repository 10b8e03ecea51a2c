package resp

import (
	"context"
	"errors"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/redcon"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/server/apierr"
	"github.com/wheelq/wheelq/server/auth"
	"github.com/wheelq/wheelq/server/internal/runs"
)

// spec is one command: its arity as Redis writes it (n: exactly n
// arguments with the name; -n: at least n), whether it may run before
// AUTH, and what it does (with the arguments after the name).
type spec struct {
	arity  int
	noauth bool
	run    func(s *Server, c redcon.Conn, sess *session, args [][]byte) error
	// summary is COMMAND DOCS's line.
	summary string
}

// newTable makes the command table (each Server holds its own).
func newTable() map[string]spec {
	return map[string]spec{
		"ping":          {-1, false, cmdPing, "PING [message]"},
		"auth":          {-2, true, cmdAuth, "AUTH [user] token"},
		"hello":         {-1, true, cmdHello, "HELLO [2|3 [AUTH user token] [SETNAME name]]"},
		"select":        {2, false, cmdSelect, "SELECT 0"},
		"client":        {-2, false, cmdClient, "CLIENT SETNAME name | GETNAME | SETINFO attr value | ID"},
		"quit":          {-1, true, cmdQuit, "QUIT"},
		"command":       {-1, true, cmdCommand, "COMMAND [COUNT | INFO [name...] | LIST [FILTERBY PATTERN glob] | DOCS [name...] | GETKEYS command [arg...] | HELP]"},
		"wq.schedule":   {-3, false, cmdSchedule, "WQ.SCHEDULE topic payload [ID id] [DELAY ms | DELAYUS us | AT unix-ms | ATUS unix-us] [MAXATTEMPTS n] [REPLACE] [HEADER name value]..."},
		"wq.cancel":     {3, false, cmdCancel, "WQ.CANCEL topic id"},
		"wq.reschedule": {5, false, cmdReschedule, "WQ.RESCHEDULE topic id DELAY ms | DELAYUS us | AT unix-ms | ATUS unix-us"},
		"wq.get":        {3, false, cmdGet, "WQ.GET topic id"},
		"wq.reserve":    {-3, false, cmdReserve, "WQ.RESERVE [COUNT n] [BLOCK ms] [TTR ms] [WITHMETA] TOPICS topic [topic...]"},
		"wq.ack":        {4, false, cmdAck, "WQ.ACK topic id token"},
		"wq.nack":       {-4, false, cmdNack, "WQ.NACK topic id token [RETRY ms] [PERMANENT] [ERROR message]"},
		"wq.touch":      {-4, false, cmdTouch, "WQ.TOUCH topic id token [TTR ms]"},
		"wq.counts":     {1, false, cmdCounts, "WQ.COUNTS"},
		"wq.pause":      {2, false, cmdPause, "WQ.PAUSE topic"},
		"wq.resume":     {2, false, cmdResume, "WQ.RESUME topic"},
		"wq.recur":      {-5, false, cmdRecur, "WQ.RECUR name topic EVERY ms | CRON expression [TZ zone] [PAYLOAD bytes] [MAXATTEMPTS n] [START unix-ms] [END unix-ms] [MISSED latest|skip|each] [MAXMISSED n] [HEADER name value]..."},
		"wq.recurs":     {1, false, cmdRecurs, "WQ.RECURS"},
		"wq.unrecur":    {2, false, cmdUnrecur, "WQ.UNRECUR name"},
	}
}

// invalid is an Invalid error.
func invalid(format string, args ...any) error { return apierr.New(apierr.Invalid, format, args...) }

// once refuses an option given twice (as Redis's own commands do, rather
// than the last one silently winning), recording opt in seen; a HEADER
// may come again, with another name (args[i+1]).
func once(seen map[string]bool, opt string, args [][]byte, i int) error {
	key := opt
	if opt == "HEADER" && i+1 < len(args) {
		key = "HEADER " + string(args[i+1])
	}
	if seen[key] {
		return invalid("syntax error: %s given twice", clip([]byte(key)))
	}
	seen[key] = true
	return nil
}

// num parses a decimal argument within [lo, hi].
func num(b []byte, what string, lo, hi int64) (int64, error) {
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, invalid("%s %q: want an integer from %d to %d", what, clip(b), lo, hi)
	}
	return n, nil
}

// maxMS is the largest millisecond count taken (a year and a day).
const maxMS = 366 * 24 * 3600 * 1000

// parseWhen reads a due time option's value: DELAY ms and DELAYUS µs (a
// delay, at most a year and a day; at is zero), or AT and ATUS, Unix time
// in ms and µs (at).
func parseWhen(opt string, b []byte) (delay time.Duration, at time.Time, err error) {
	var n int64
	switch opt {
	case "DELAY":
		n, err = num(b, opt, 0, maxMS)
		delay = time.Duration(n) * time.Millisecond
	case "DELAYUS":
		n, err = num(b, opt, 0, maxMS*1000)
		delay = time.Duration(n) * time.Microsecond
	case "AT":
		if n, err = num(b, opt, 0, 1<<50); err == nil {
			at = time.UnixMilli(n)
		}
	default: // ATUS
		if n, err = num(b, opt, 0, 1<<50*1000); err == nil {
			at = time.UnixMicro(n)
		}
	}
	return delay, at, err
}

func (s *Server) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.opts.Timeout)
}

func cmdPing(_ *Server, c redcon.Conn, _ *session, args [][]byte) error {
	switch len(args) {
	case 0:
		c.WriteString("PONG")
	case 1:
		c.WriteBulk(args[0])
	default:
		return invalid("wrong number of arguments for 'ping' command")
	}
	return nil
}

func (s *Server) login(sess *session, token string) error {
	az := s.authz()
	p, err := az.Authenticate(token)
	if err != nil {
		return apierr.New(apierr.Unauthorized, "invalid token")
	}
	sess.p, sess.token, sess.az = p, token, az
	return nil
}

func cmdAuth(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	if len(args) > 2 {
		return invalid("syntax error: AUTH [user] token")
	}
	// AUTH token, or AUTH user token (the user name is not used).
	if err := s.login(sess, string(args[len(args)-1])); err != nil {
		c.WriteError("WRONGPASS invalid username-password pair or user is disabled.")
		return nil
	}
	c.WriteString("OK")
	return nil
}

func cmdHello(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	proto := max(sess.proto, 2)
	var name string
	var named bool
	if len(args) > 0 {
		v, err := strconv.Atoi(string(args[0]))
		if err != nil {
			return invalid("Protocol version is not an integer or out of range")
		}
		if v != 2 && v != 3 {
			c.WriteError("NOPROTO sorry, this protocol version is not supported (wheelq speaks RESP2 and RESP3)")
			return nil
		}
		proto = v
		for i := 1; i < len(args); i++ {
			switch strings.ToUpper(string(args[i])) {
			case "AUTH":
				if i+2 >= len(args) {
					return invalid("syntax error in HELLO option 'auth'")
				}
				if err := s.login(sess, string(args[i+2])); err != nil {
					c.WriteError("WRONGPASS invalid username-password pair or user is disabled.")
					return nil
				}
				i += 2
			case "SETNAME":
				if i+1 >= len(args) {
					return invalid("syntax error in HELLO option 'setname'")
				}
				name, named = string(args[i+1]), true // set once HELLO succeeds
				i++
			default:
				return invalid("syntax error in HELLO option '%s'", clip(args[i]))
			}
		}
	}
	if sess.p == nil {
		c.WriteError("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
		return nil
	}
	sess.proto = proto
	if named {
		sess.name = name
	}
	w := sess.out(c)
	w.Map(7)
	for _, kv := range []string{"server", "wheelq", "version", "1.0.0", "proto"} {
		c.WriteBulkString(kv)
	}
	c.WriteInt(proto)
	c.WriteBulkString("id")
	c.WriteInt(1)
	for _, kv := range []string{"mode", "standalone", "role", "master"} {
		c.WriteBulkString(kv)
	}
	c.WriteBulkString("modules")
	c.WriteArray(0)
	return nil
}

func cmdSelect(_ *Server, c redcon.Conn, _ *session, args [][]byte) error {
	if string(args[0]) != "0" {
		return invalid("DB index is out of range (wheelq has database 0 only)")
	}
	c.WriteString("OK")
	return nil
}

func cmdClient(_ *Server, c redcon.Conn, sess *session, args [][]byte) error {
	switch strings.ToUpper(string(args[0])) {
	case "SETNAME":
		if len(args) != 2 {
			return invalid("wrong number of arguments for 'client|setname' command")
		}
		sess.name = string(args[1])
		c.WriteString("OK")
	case "GETNAME":
		if sess.name == "" {
			sess.out(c).Null()
		} else {
			c.WriteBulkString(sess.name)
		}
	case "SETINFO":
		if len(args) != 3 {
			return invalid("wrong number of arguments for 'client|setinfo' command")
		}
		c.WriteString("OK")
	case "ID":
		c.WriteInt(1)
	default:
		return invalid("unknown subcommand '%s' (wheelq takes SETNAME, GETNAME, SETINFO, ID)", clip(args[0]))
	}
	return nil
}

func cmdQuit(_ *Server, c redcon.Conn, sess *session, _ [][]byte) error {
	c.WriteString("OK")
	sess.closed = true
	return c.Close()
}

// commandSubs are COMMAND's subcommands and their arities, as Redis
// counts them (COMMAND and the subcommand included).
var commandSubs = map[string]int{"COUNT": 2, "INFO": -2, "DOCS": -2, "LIST": -2, "GETKEYS": -3, "GETKEYSANDFLAGS": -3, "HELP": 2}

// commandHelp is COMMAND HELP's reply, Redis's words for wheelq's table.
var commandHelp = []string{
	"COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"(no subcommand)",
	"    Return details about all wheelq commands.",
	"COUNT",
	"    Return the total number of commands in this wheelq server.",
	"LIST [FILTERBY PATTERN <glob>]",
	"    Return a list of all commands in this wheelq server.",
	"INFO [<command-name> ...]",
	"    Return details about multiple commands (a null for one not known).",
	"    If no command names are given, details for all commands are returned.",
	"DOCS [<command-name> ...]",
	"    Return documentation details (the summary: the syntax) about multiple commands.",
	"    If no command names are given, documentation details for all",
	"    commands are returned.",
	"GETKEYS <full-command>",
	"    Return the keys from a full command (wheelq's commands have none).",
	"GETKEYSANDFLAGS <full-command>",
	"    Return the keys and the access flags from a full command (none).",
	"HELP",
	"    Prints this help.",
}

// cmdCommand answers COMMAND and its subcommands as Redis 7 does, for
// wheelq's table: COMMAND and COMMAND INFO an entry of ten fields per
// command (COMMAND INFO one per name asked, a null for an unknown one),
// COUNT an integer, LIST the names, DOCS a map of name to its summary.
func cmdCommand(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	if len(args) == 0 {
		names := s.commandNames()
		c.WriteArray(len(names))
		for _, n := range names {
			s.writeCommandInfo(c, n)
		}
		return nil
	}
	sub := strings.ToUpper(string(args[0]))
	arity, ok := commandSubs[sub]
	if !ok {
		return invalid("unknown subcommand '%s'. Try COMMAND HELP.", clip(args[0]))
	}
	if n := len(args) + 1; (arity > 0 && n != arity) || (arity < 0 && n < -arity) {
		return invalid("wrong number of arguments for 'command|%s' command", strings.ToLower(sub))
	}
	names := args[1:]
	switch sub {
	case "COUNT":
		c.WriteInt(len(s.cmds))
	case "INFO":
		if len(names) == 0 {
			all := s.commandNames()
			c.WriteArray(len(all))
			for _, n := range all {
				s.writeCommandInfo(c, n)
			}
			return nil
		}
		c.WriteArray(len(names))
		for _, n := range names {
			name := strings.ToLower(string(n))
			if _, ok := s.cmds[name]; ok {
				s.writeCommandInfo(c, name)
			} else {
				sess.out(c).Null()
			}
		}
	case "LIST":
		match := func(string) bool { return true }
		if len(names) > 0 {
			if len(names) != 3 || !strings.EqualFold(string(names[0]), "FILTERBY") {
				return invalid("syntax error")
			}
			switch by, v := strings.ToUpper(string(names[1])), strings.ToLower(string(names[2])); by {
			case "PATTERN":
				match = func(n string) bool { ok, _ := path.Match(v, n); return ok }
			case "MODULE", "ACLCAT":
				match = func(string) bool { return false } // no modules, no ACL categories
			default:
				return invalid("syntax error")
			}
		}
		var pick []string
		for _, n := range s.commandNames() {
			if match(n) {
				pick = append(pick, n)
			}
		}
		c.WriteArray(len(pick))
		for _, n := range pick {
			c.WriteBulkString(n)
		}
	case "DOCS":
		var pick []string
		if len(names) == 0 {
			pick = s.commandNames()
		} else {
			for _, n := range names {
				if _, ok := s.cmds[strings.ToLower(string(n))]; ok {
					pick = append(pick, strings.ToLower(string(n)))
				}
			}
		}
		w := sess.out(c)
		w.Map(len(pick))
		for _, n := range pick {
			c.WriteBulkString(n)
			w.Map(1)
			c.WriteBulkString("summary")
			c.WriteBulkString(s.cmds[n].summary)
		}
	case "GETKEYS", "GETKEYSANDFLAGS":
		sp, ok := s.cmds[strings.ToLower(string(names[0]))]
		if !ok {
			return invalid("Invalid command specified")
		}
		if n := len(names); (sp.arity > 0 && n != sp.arity) || (sp.arity < 0 && n < -sp.arity) {
			return invalid("Invalid number of arguments specified for command")
		}
		return invalid("The command has no key arguments")
	case "HELP":
		c.WriteArray(len(commandHelp))
		for _, l := range commandHelp {
			c.WriteString(l)
		}
	}
	return nil
}

// commandNames are the table's names, in order.
func (s *Server) commandNames() []string {
	names := make([]string, 0, len(s.cmds))
	for n := range s.cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// writeCommandInfo writes the COMMAND entry of name, a command in the
// table, with Redis 7's ten fields: name, arity (negative: at least),
// flags (no_auth for those that may come before AUTH), first key, last
// key and step (no keys: 0), ACL categories, tips, key specifications and
// subcommands (none).
func (s *Server) writeCommandInfo(c redcon.Conn, name string) {
	sp := s.cmds[name]
	c.WriteArray(10)
	c.WriteBulkString(name)
	c.WriteInt(sp.arity)
	if sp.noauth {
		c.WriteArray(1)
		c.WriteString("no_auth")
	} else {
		c.WriteArray(0)
	}
	c.WriteInt(0)
	c.WriteInt(0)
	c.WriteInt(0)
	for range 4 {
		c.WriteArray(0)
	}
}

// ScheduleArgs are WQ.SCHEDULE's parsed arguments.
type ScheduleArgs struct {
	Topic   string
	ID      string // the ID option's, "" without one
	Payload []byte
	Opts    []wheelq.Option
}

// ParseSchedule parses WQ.SCHEDULE's arguments (after the name).
func ParseSchedule(args [][]byte) (ScheduleArgs, error) {
	if len(args) < 2 {
		return ScheduleArgs{}, invalid("wrong number of arguments for 'wq.schedule' command")
	}
	a := ScheduleArgs{Topic: string(args[0]), Payload: args[1]}
	var when, headers bool
	h := map[string]string{}
	seen := map[string]bool{}
	for i := 2; i < len(args); i++ {
		opt := strings.ToUpper(string(args[i]))
		need := 1
		switch opt {
		case "REPLACE":
			need = 0
		case "HEADER":
			need = 2
		case "ID", "DELAY", "DELAYUS", "AT", "ATUS", "MAXATTEMPTS":
		default:
			return a, invalid("syntax error: unknown option '%s' (ID, DELAY, DELAYUS, AT, ATUS, MAXATTEMPTS, REPLACE, HEADER)", clip(args[i]))
		}
		if err := once(seen, opt, args, i); err != nil {
			return a, err
		}
		if i+need >= len(args) {
			return a, invalid("syntax error: %s needs %d argument(s)", opt, need)
		}
		switch opt {
		case "ID":
			a.ID = string(args[i+1])
			a.Opts = append(a.Opts, wheelq.ID(a.ID))
		case "DELAY", "DELAYUS", "AT", "ATUS":
			if when {
				return a, invalid("syntax error: one of DELAY, DELAYUS, AT and ATUS, once")
			}
			when = true
			delay, at, err := parseWhen(opt, args[i+1])
			if err != nil {
				return a, err
			}
			if at.IsZero() {
				a.Opts = append(a.Opts, wheelq.After(delay))
			} else {
				a.Opts = append(a.Opts, wheelq.At(at))
			}
		case "MAXATTEMPTS":
			n, err := num(args[i+1], "MAXATTEMPTS", 1, 1<<31-1)
			if err != nil {
				return a, err
			}
			a.Opts = append(a.Opts, wheelq.MaxAttempts(int(n)))
		case "REPLACE":
			a.Opts = append(a.Opts, wheelq.OnDuplicate(wheelq.Replace))
		case "HEADER":
			headers = true
			h[string(args[i+1])] = string(args[i+2])
		}
		i += need
	}
	if headers {
		a.Opts = append(a.Opts, wheelq.Headers(h))
	}
	return a, nil
}

func cmdSchedule(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	if more := s.leading(c.PeekPipeline(), "wq.schedule", wheelq.MaxBatchJobs-1); more > 0 {
		schedulePipelined(s, c, sess, args, more)
		return nil
	}
	a, err := ParseSchedule(args)
	if err != nil {
		return err
	}
	if err := sess.p.Allow(auth.Produce, a.Topic); err != nil {
		return err
	}
	ctx, cancel := s.ctx()
	defer cancel()
	id, err := s.q.Schedule(ctx, a.Topic, a.Payload, a.Opts...)
	if err != nil {
		return err
	}
	c.WriteBulkString(id)
	return nil
}

// schedulePipelined schedules the WQ.SCHEDULE of args and the more
// WQ.SCHEDULEs pipelined right after it together (ScheduleBatch: a round
// trip, not one each), and answers each in order, as if run one at a
// time: a job whose id came before it in the pipeline goes in the next
// batch, so that it meets the earlier one as it would have. Then it
// serves the commands pipelined after them as usual.
func schedulePipelined(s *Server, c redcon.Conn, sess *session, args [][]byte, more int) {
	cmds := c.ReadPipeline()
	sess.began(cmds[:more]...)
	all := pipelinedArgs(args, cmds[:more])
	ids := make([]string, len(all))
	errs := make([]error, len(all))
	var batch []wheelq.BatchJob
	var keys []string
	var at []int
	for i, a := range all {
		sa, err := ParseSchedule(a)
		if err == nil {
			err = sess.p.Allow(auth.Produce, sa.Topic)
		}
		if err != nil {
			errs[i] = err
			continue
		}
		batch = append(batch, wheelq.BatchJob{Topic: sa.Topic, Payload: sa.Payload, Options: sa.Opts})
		keys = append(keys, runs.Key(sa.Topic, sa.ID))
		at = append(at, i)
	}
	for _, r := range runs.Split(len(batch), wheelq.MaxBatchJobs, func(k int) string { return keys[k] }) {
		ctx, cancel := s.ctx()
		out, err := s.q.ScheduleBatch(ctx, batch[r[0]:r[1]])
		cancel()
		for k, i := range at[r[0]:r[1]] {
			if err != nil {
				errs[i] = err
			} else {
				ids[i], errs[i] = out[k].ID, out[k].Err
			}
		}
	}
	for i, err := range errs {
		if err != nil {
			s.writeErr(c, err)
		} else {
			c.WriteBulkString(ids[i])
		}
	}
	for _, cmd := range cmds[more:] {
		s.serve(c, cmd)
	}
}

func cmdCancel(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	topic := string(args[0])
	if err := sess.p.Allow(auth.Produce, topic); err != nil {
		return err
	}
	ctx, cancel := s.ctx()
	defer cancel()
	if err := s.q.Cancel(ctx, topic, string(args[1])); err != nil {
		return err
	}
	c.WriteInt(1)
	return nil
}

func cmdReschedule(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	topic := string(args[0])
	if err := sess.p.Allow(auth.Produce, topic); err != nil {
		return err
	}
	opt := strings.ToUpper(string(args[2]))
	switch opt {
	case "DELAY", "DELAYUS", "AT", "ATUS":
	default:
		return invalid("syntax error: WQ.RESCHEDULE topic id DELAY ms | DELAYUS us | AT unix-ms | ATUS unix-us")
	}
	delay, at, err := parseWhen(opt, args[3])
	if err != nil {
		return err
	}
	if at.IsZero() {
		at = time.Now().Add(delay)
	}
	ctx, cancel := s.ctx()
	defer cancel()
	if err := s.q.Reschedule(ctx, topic, string(args[1]), at); err != nil {
		return err
	}
	c.WriteString("OK")
	return nil
}

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func cmdGet(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	topic := string(args[0])
	if err := sess.p.AllowAny(topic, auth.Produce, auth.Consume); err != nil {
		return err
	}
	ctx, cancel := s.ctx()
	defer cancel()
	j, err := s.q.Lookup(ctx, topic, string(args[1]))
	if err != nil {
		return err
	}
	// A map (RESP3), or a flat array of field, value (RESP2).
	fields := []any{"topic", j.Topic, "id", j.ID, "state", j.State.String(), "due_ms", ms(j.Due), "due_us", us(j.Due),
		"attempts", j.Attempts, "max_attempts", j.MaxAttempts, "last_error", j.LastError,
		"created_ms", ms(j.Created), "finished_ms", ms(j.Finished), "reserved", boolInt(j.Reserved)}
	w := sess.out(c)
	w.Map(len(fields)/2 + 2)
	for _, f := range fields {
		switch v := f.(type) {
		case string:
			c.WriteBulkString(v)
		case int:
			c.WriteInt(v)
		case int64:
			c.WriteInt64(v)
		}
	}
	c.WriteBulkString("payload")
	if j.Payload == nil {
		w.Null()
	} else {
		c.WriteBulk(j.Payload)
	}
	c.WriteBulkString("headers")
	w.Map(len(j.Headers))
	for k, v := range j.Headers {
		c.WriteBulkString(k)
		c.WriteBulkString(v)
	}
	return nil
}

func us(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ReserveArgs are WQ.RESERVE's parsed arguments.
type ReserveArgs struct {
	Opts  wheelq.ReserveOptions
	Block time.Duration // 0: do not wait
	// Meta (WITHMETA) adds each job's max attempts, last error and
	// headers to its reply.
	Meta bool
}

// ParseReserve parses WQ.RESERVE's arguments (after the name); maxBlock
// bounds BLOCK.
func ParseReserve(args [][]byte, maxBlock time.Duration) (ReserveArgs, error) {
	var a ReserveArgs
	seen := map[string]bool{}
	for i := 0; i < len(args); i++ {
		opt := strings.ToUpper(string(args[i]))
		if opt != "TOPICS" {
			if err := once(seen, opt, args, i); err != nil {
				return a, err
			}
		}
		if opt == "TOPICS" {
			for _, t := range args[i+1:] {
				a.Opts.Topics = append(a.Opts.Topics, string(t))
			}
			break
		}
		if opt == "WITHMETA" {
			a.Meta = true
			continue
		}
		if i+1 >= len(args) {
			return a, invalid("syntax error: %s needs a value", clip(args[i]))
		}
		switch opt {
		case "COUNT":
			n, err := num(args[i+1], "COUNT", 1, wheelq.MaxReserve)
			if err != nil {
				return a, err
			}
			a.Opts.Max = int(n)
		case "BLOCK":
			n, err := num(args[i+1], "BLOCK", 0, maxBlock.Milliseconds())
			if err != nil {
				return a, err
			}
			a.Block = time.Duration(n) * time.Millisecond
		case "TTR":
			n, err := num(args[i+1], "TTR", wheelq.MinTTR.Milliseconds(), wheelq.MaxTTR.Milliseconds())
			if err != nil {
				return a, err
			}
			a.Opts.TTR = time.Duration(n) * time.Millisecond
		default:
			return a, invalid("syntax error: unknown option '%s' (COUNT, BLOCK, TTR, WITHMETA, then TOPICS)", clip(args[i]))
		}
		i++
	}
	if len(a.Opts.Topics) == 0 {
		return a, invalid("syntax error: WQ.RESERVE [COUNT n] [BLOCK ms] [TTR ms] [WITHMETA] TOPICS topic [topic...]")
	}
	return a, nil
}

func cmdReserve(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	a, err := ParseReserve(args, s.opts.MaxBlock)
	if err != nil {
		return err
	}
	for _, t := range a.Opts.Topics {
		if err := sess.p.Allow(auth.Consume, t); err != nil {
			return err
		}
	}
	wait := a.Block
	if wait == 0 {
		// What is ready, at once (the call is still bounded).
		a.Opts.NoWait, wait = true, s.opts.Timeout
	}
	ctx, cancel := context.WithTimeout(s.blockCtx, wait)
	defer cancel()
	defer context.AfterFunc(s.reauthCtx(), cancel)()
	var w *peerWatch
	if a.Block > 0 {
		// Answer what was pipelined before, then block, watching for the
		// client's leaving. The commands run before it no longer count
		// against resp.max_inflight_bytes while it blocks (settle): redcon
		// would come back for more, which gives them back, only after it.
		if sess.lim != nil {
			sess.lim.settle()
		}
		if err := redcon.BaseWriter(c).Flush(); err != nil {
			sess.closed = true
			return c.Close()
		}
		w = watchPeer(c.NetConn(), cancel)
	}
	got, err := s.q.Reserve(ctx, a.Opts)
	if w != nil {
		if len(got) == 0 || w.Went() || !w.Watching() {
			// Ended now: no jobs to answer; or the client left; or the
			// watch had not begun, and ending it is one look at the
			// socket, which finds a client that left within the grace.
			if w.Stop() {
				// The client went away while blocked: what came for it
				// goes back at once rather than lapsing at its
				// time-to-run.
				s.release(got)
				sess.closed = true
				return c.Close()
			}
		} else {
			// A watch that began ends once the reply is out: ending it
			// first (a wake of its goroutine, and a wait for it) delayed
			// every reply.
			defer w.Stop()
		}
	}
	sess.reauth(s) // the tokens may have been reloaded while it blocked
	if len(got) > 0 || sess.p == nil {
		// Hand out nothing to a token revoked meanwhile.
		for _, t := range a.Opts.Topics {
			if sess.p == nil {
				s.release(got)
				c.WriteError("NOAUTH Authentication required.")
				return nil
			}
			if err := sess.p.Allow(auth.Consume, t); err != nil {
				s.release(got)
				return err
			}
		}
	}
	if len(got) == 0 {
		if err != nil && ctx.Err() == nil {
			return err
		}
		sess.out(c).NullArray() // as BLPOP's timeout
		return nil
	}
	// Each job: topic, id, token, payload, attempt, due (unix ms),
	// deadline (unix ms); WITHMETA adds max attempts, last error and
	// headers (a map).
	c.WriteArray(len(got))
	for _, r := range got {
		if a.Meta {
			c.WriteArray(10)
		} else {
			c.WriteArray(7)
		}
		c.WriteBulkString(r.Topic)
		c.WriteBulkString(r.ID)
		c.WriteBulkString(r.Token)
		c.WriteBulk(r.Job.Payload)
		c.WriteInt(r.Job.Attempt)
		c.WriteInt64(r.Job.Due.UnixMilli())
		c.WriteInt64(r.Deadline.UnixMilli())
		if a.Meta {
			c.WriteInt(r.Job.MaxAttempts)
			c.WriteBulkString(r.Job.LastError)
			sess.out(c).Map(len(r.Job.Headers))
			for k, v := range r.Job.Headers {
				c.WriteBulkString(k)
				c.WriteBulkString(v)
			}
		}
	}
	if err := redcon.BaseWriter(c).Flush(); err != nil {
		// Not written: the jobs go back at once. (A reply written but
		// never read, the connection closing after, is a lost reply: its
		// jobs lapse at their time-to-run.)
		s.release(got)
		sess.closed = true
		return c.Close()
	}
	return nil
}

// release hands back reservations a client did not get.
func (s *Server) release(got []*wheelq.Reservation) {
	if len(got) == 0 {
		return
	}
	ctx, cancel := s.ctx()
	defer cancel()
	if err := s.q.Release(ctx, got...); err != nil {
		s.opts.Logger.Warn("wheelq server: releasing the jobs of a closed connection; they lapse at their time-to-run instead", "err", err, "jobs", len(got))
	}
}

func receipt(sess *session, args [][]byte) (wheelq.Receipt, error) {
	r := wheelq.Receipt{Topic: string(args[0]), ID: string(args[1]), Token: string(args[2])}
	return r, sess.p.Allow(auth.Consume, r.Topic)
}

func cmdAck(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	if more := s.leading(c.PeekPipeline(), "wq.ack", wheelq.MaxReserve-1); more > 0 {
		ackPipelined(s, c, sess, args, more)
		return nil
	}
	r, err := receipt(sess, args)
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx()
	defer cancel()
	if err := s.q.Ack(ctx, r); err != nil {
		return err
	}
	c.WriteString("OK")
	return nil
}

// leading counts the commands named name (in lower case), of a right
// arity, at the head of cmds: at most most. Pipelined after a command of
// that name, they are run with it in one round trip (schedulePipelined,
// ackPipelined, cmdSAdd).
func (s *Server) leading(cmds []redcon.Command, name string, most int) int {
	sp := s.cmds[name]
	n := 0
	for _, cmd := range cmds {
		k := len(cmd.Args)
		if n == most || (sp.arity > 0 && k != sp.arity) || (sp.arity < 0 && k < -sp.arity) ||
			!strings.EqualFold(string(cmd.Args[0]), name) {
			break
		}
		n++
	}
	return n
}

// pipelinedArgs is args then each of cmds' arguments after its name.
func pipelinedArgs(args [][]byte, cmds []redcon.Command) [][][]byte {
	all := make([][][]byte, 0, 1+len(cmds))
	all = append(all, args)
	for _, cmd := range cmds {
		all = append(all, cmd.Args[1:])
	}
	return all
}

// ackPipelined acks the WQ.ACK of args and the more WQ.ACKs pipelined
// right after it in one round trip (AckAll), where one at a time each
// waited for the round trip of the one before. It answers each in order,
// then serves the commands pipelined after them as usual.
func ackPipelined(s *Server, c redcon.Conn, sess *session, args [][]byte, more int) {
	cmds := c.ReadPipeline()
	sess.began(cmds[:more]...)
	all := pipelinedArgs(args, cmds[:more])
	errs := make([]error, len(all))
	rs := make([]wheelq.Receipt, 0, len(all))
	idx := make([]int, 0, len(all))
	for i, a := range all {
		r, err := receipt(sess, a)
		if err != nil {
			errs[i] = err
			continue
		}
		rs = append(rs, r)
		idx = append(idx, i)
	}
	if len(rs) > 0 {
		ctx, cancel := s.ctx()
		for k, err := range s.q.AckAll(ctx, rs...) {
			errs[idx[k]] = err
		}
		cancel()
	}
	for _, err := range errs {
		if err != nil {
			s.writeErr(c, err)
		} else {
			c.WriteString("OK")
		}
	}
	for _, cmd := range cmds[more:] {
		s.serve(c, cmd)
	}
}

func cmdNack(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	r, err := receipt(sess, args)
	if err != nil {
		return err
	}
	var opts wheelq.NackOptions
	for i := 3; i < len(args); i++ {
		switch strings.ToUpper(string(args[i])) {
		case "PERMANENT":
			opts.Permanent = true
			continue
		case "RETRY":
			if i+1 >= len(args) {
				return invalid("syntax error: RETRY needs milliseconds")
			}
			n, err := num(args[i+1], "RETRY", 0, maxMS)
			if err != nil {
				return err
			}
			opts.RetryAfter = time.Duration(n) * time.Millisecond
		case "ERROR":
			if i+1 >= len(args) {
				return invalid("syntax error: ERROR needs a message")
			}
			opts.Err = errors.New(string(args[i+1]))
		default:
			return invalid("syntax error: unknown option '%s' (RETRY, PERMANENT, ERROR)", clip(args[i]))
		}
		i++
	}
	ctx, cancel := s.ctx()
	defer cancel()
	if err := s.q.Nack(ctx, &wheelq.Reservation{Receipt: r}, opts); err != nil {
		return err
	}
	c.WriteString("OK")
	return nil
}

func cmdTouch(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	r, err := receipt(sess, args)
	if err != nil {
		return err
	}
	ttr := wheelq.DefaultTTR
	switch {
	case len(args) == 5 && strings.EqualFold(string(args[3]), "TTR"):
		n, err := num(args[4], "TTR", wheelq.MinTTR.Milliseconds(), wheelq.MaxTTR.Milliseconds())
		if err != nil {
			return err
		}
		ttr = time.Duration(n) * time.Millisecond
	case len(args) != 3:
		return invalid("syntax error: WQ.TOUCH topic id token [TTR ms]")
	}
	ctx, cancel := s.ctx()
	defer cancel()
	dl, err := s.q.Touch(ctx, r, ttr)
	if err != nil {
		return err
	}
	c.WriteInt64(dl.UnixMilli())
	return nil
}

func cmdCounts(s *Server, c redcon.Conn, sess *session, _ [][]byte) error {
	ctx, cancel := s.ctx()
	defer cancel()
	cs, err := s.q.Counts(ctx)
	if err != nil {
		return err
	}
	var mine []wheelq.TopicCounts
	for _, tc := range cs {
		if sess.p.Allow(auth.Admin, tc.Topic) == nil {
			mine = append(mine, tc)
		}
	}
	// Each topic: topic, pending, overdue, running, dead, paused.
	c.WriteArray(len(mine))
	for _, tc := range mine {
		c.WriteArray(6)
		c.WriteBulkString(tc.Topic)
		c.WriteInt64(tc.Pending)
		c.WriteInt64(tc.Overdue)
		c.WriteInt64(tc.Running)
		c.WriteInt64(tc.Dead)
		c.WriteInt(boolInt(tc.Paused))
	}
	return nil
}

func pauseResume(pause bool) func(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	return func(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
		topic := string(args[0])
		if err := sess.p.Allow(auth.Admin, topic); err != nil {
			return err
		}
		ctx, cancel := s.ctx()
		defer cancel()
		var err error
		if pause {
			err = s.q.Pause(ctx, topic)
		} else {
			err = s.q.Resume(ctx, topic)
		}
		if err != nil {
			return err
		}
		c.WriteString("OK")
		return nil
	}
}

func cmdPause(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	return pauseResume(true)(s, c, sess, args)
}

func cmdResume(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	return pauseResume(false)(s, c, sess, args)
}
