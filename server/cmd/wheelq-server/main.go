// Command wheelq-server runs the wheelq server: delayed jobs over HTTP
// for services in any language (see docs/server.md).
//
//	wheelq-server -dev                         # a first try: in-process Redis, keeps nothing
//	wheelq-server -config wheelq-server.toml   # production
//	wheelq-server -print-config [-config F]    # the effective configuration, secrets masked
//	wheelq-server -check-config -config F      # check, then exit
//	wheelq-server token -id NAME               # make a token and its config entry
//
// The configuration is the file, then WHEELQ_SERVER_* environment
// variables, then flags: -addr, -redis-url, -namespace, -pull, -log-format,
// -log-level, and -set key=value for any other key. SIGTERM or an
// interrupt stops it gracefully; SIGHUP reloads the tokens and the TLS
// certificate.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq/server"
	"github.com/wheelq/wheelq/server/auth"
	"github.com/wheelq/wheelq/server/config"
)

func main() {
	// The server says itself when Redis cannot be reached; go-redis's own
	// lines (a "failed to dial" per pool connection) would only repeat it.
	redis.SetLogger(silent{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}

// silent drops go-redis's log lines.
type silent struct{}

func (silent) Printf(context.Context, string, ...any) {}

// flagKeys maps the named flags to the keys they set.
var flagKeys = map[string]string{
	"addr":       "http.addr",
	"redis-url":  "redis.url",
	"namespace":  "queue.namespace",
	"pull":       "queue.pull",
	"log-format": "log.format",
	"log-level":  "log.level",
}

// sets collects -set key=value flags.
type sets map[string]string

func (s sets) String() string { return "" }

func (s sets) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("want key=value, like http.max_wait=30s")
	}
	s[k] = val
	return nil
}

func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "token" {
		return tokenCmd(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("wheelq-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "the TOML configuration file (see server/wheelq-server.toml)")
	dev := fs.Bool("dev", false, "run on an in-process Redis that keeps nothing: a first try, never production")
	printCfg := fs.Bool("print-config", false, "print the effective configuration (secrets masked) and exit")
	check := fs.Bool("check-config", false, "check the configuration and exit")
	for name, key := range flagKeys {
		fs.String(name, "", "sets "+key)
	}
	extra := sets{}
	fs.Var(extra, "set", "key=value: sets any key (repeatable), like -set http.max_wait=30s")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: wheelq-server [flags]\n       wheelq-server token -id ID [-produce P] [-consume P] [-admin P]   (a new token and its [[token]] entry; token -h for more)\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "wheelq-server: unexpected argument %q (commands: token)\n", fs.Arg(0))
		return 2
	}
	flags := map[string]string{}
	fs.Visit(func(f *flag.Flag) {
		if key, ok := flagKeys[f.Name]; ok {
			flags[key] = f.Value.String()
		}
	})
	for k, v := range extra {
		flags[k] = v
	}
	cfg, err := config.Load(*path, environ, flags)
	if err != nil {
		fmt.Fprintf(stderr, "wheelq-server: %v\n", err)
		return 2
	}
	if *printCfg {
		if err := cfg.Write(stdout); err != nil {
			fmt.Fprintf(stderr, "wheelq-server: %v\n", err)
			return 1
		}
		return 0
	}
	logger := server.NewLogger(stderr, cfg.Log)
	s, err := server.New(cfg, server.Options{ConfigPath: *path, Environ: environ, Flags: flags, Dev: *dev, Logger: logger})
	if err != nil {
		fmt.Fprintf(stderr, "wheelq-server: %v\n", err)
		if errors.Is(err, server.ErrConfig) || errors.Is(err, config.ErrInvalid) {
			return 2
		}
		return 1
	}
	if *check {
		fmt.Fprintln(stdout, "wheelq-server: configuration OK")
		return 0
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	hctx, hstop := context.WithCancel(ctx)
	defer hstop()
	go func() {
		for {
			select {
			case <-hctx.Done():
				return
			case <-hup:
				if err := s.Reload(); err != nil {
					logger.Error("wheelq server: reload refused; keeping the tokens and certificate in use", "err", err)
				} else {
					msg := "wheelq server: reloaded the tokens"
					if cfg.HTTP.TLSCert != "" {
						msg += " and the TLS certificate"
					}
					logger.Info(msg + "; other keys need a restart")
				}
			}
		}
	}()
	if err := s.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "wheelq-server: %v\n", err)
		return 1
	}
	return 0
}

// tokenCmd makes a token.
func tokenCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("wheelq-server token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	id := fs.String("id", "", "the token's name (no '_' or spaces): it shows in access logs")
	produce := fs.String("produce", "*", "topic patterns it may produce to (comma-separated globs)")
	consume := fs.String("consume", "*", "topic patterns it may consume from")
	admin := fs.String("admin", "", "topic patterns it administers")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	tok, sum, err := auth.Generate(*id)
	if err != nil {
		fmt.Fprintf(stderr, "wheelq-server token: %v\n", err)
		return 2
	}
	list := func(s string) string {
		var q []string
		for p := range strings.SplitSeq(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				q = append(q, fmt.Sprintf("%q", p))
			}
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	split := func(s string) []string {
		var out []string
		for p := range strings.SplitSeq(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		return out
	}
	// The entry the server would refuse is refused here (a bad glob).
	if _, err := auth.New([]auth.Entry{{ID: *id, SHA256: sum, Perms: [3][]string{split(*produce), split(*consume), split(*admin)}}}, false); err != nil {
		fmt.Fprintf(stderr, "wheelq-server token: %v\n", err)
		return 2
	}
	fmt.Fprintf(stdout, "# the token (give it to the client; it is not stored anywhere):\n# %s\n", tok)
	fmt.Fprintf(stdout, "[[token]]\nid = %q\nsha256 = %q\nproduce = %s\nconsume = %s\nadmin = %s\n",
		*id, sum, list(*produce), list(*consume), list(*admin))
	return 0
}
