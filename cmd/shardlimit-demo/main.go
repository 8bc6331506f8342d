// Command shardlimit-demo is a fasthttp server limited by shardlimit's
// middleware, to see the limits, headers and 429s with curl:
//
//	go run ./cmd/shardlimit-demo
//	curl -i -H 'X-Client-ID: client-1' http://127.0.0.1:8080/foo
//	curl -i http://127.0.0.1:8080/bar        # no X-Client-ID: keyed by IP
//	curl -i -H 'X-Client-ID: rot1' http://127.0.0.1:8080/bar  # unlisted: by IP too
//	curl -i http://127.0.0.1:8080/healthz    # never limited
//
// Routes: /foo and /bar answer 200 with a short body and are limited by the
// rules; /healthz answers 200 and is not limited; /metrics (the Prometheus
// text format) and /status (a page for people: the rules, their limits and
// counters, the state of Redis, the most-denied clients) are not limited
// and are served on -metrics instead when it is set; anything else is 404
// (and limited only if a rule matches it). Clients identify with the X-Client-ID
// header, which only sorts the clients the rules list into their tiers:
// without it, or with an identity the rules do not list, requests are
// keyed by their address (IPv4 /32, IPv6 /64), so made-up identities share
// their address's budget (httplimit.UnknownIdentityAnonymous). The header
// is not authenticated here: anyone may claim to be client-1. A real
// service validates its API keys before the limiter.
//
// The seed rules (rules.json beside this file, embedded in the binary):
// client-1 may call /foo 10 times a minute (fixed window) and /bar 5 times a
// minute (sliding log); client-2 20 and 10; any other address 5 and 2.
//
// Limited responses carry every rate-limit field the middleware can write:
// X-RateLimit-Limit, -Remaining and -Reset (seconds to go), the IETF
// RateLimit-Policy and RateLimit fields (draft-ietf-httpapi-ratelimit-headers-11)
// and the verbose X-RateLimit-Window-Ms and X-RateLimit-Strategy; a 429
// adds Retry-After and a one-line text body.
//
// Counters live in memory unless -redis names a Redis server: then several
// demo servers sharing that Redis hold one cluster-wide limit per client and
// route. Each request is still decided in-process by a sync.Shared limiter
// per rule, which flushes its counts to Redis every -flush and reads back
// the other servers' (fixed window, sliding counter, sliding log), so a
// limit may be passed by what the servers admit in the couple of flush
// intervals before they see each other's counts (see package sync). GCRA
// has no such shared mode: GCRA rules are decided by sync.Exact, one Redis
// round trip (at most 50 ms) per request, exact across servers. Each rule's
// Redis keys start with <-redis-prefix><rule name>: so rules never share
// counters. If Redis is down or slow, every limiter decides locally (limits
// then hold per server) and returns to sharing when Redis answers again;
// state changes are logged on stderr.
//
//	go run ./cmd/shardlimit-demo -addr 127.0.0.1:8080 -redis 127.0.0.1:6379 &
//	go run ./cmd/shardlimit-demo -addr 127.0.0.1:8081 -redis 127.0.0.1:6379 &
//
// Flags:
//
//	-addr          listen address (default 127.0.0.1:8080)
//	-rules         JSON rules file (default: the embedded copy of rules.json)
//	-algorithm     algorithm of rules that name none (default fixed_window)
//	-redis         host:port of a Redis sharing the counters (default: none, in memory)
//	-redis-prefix  start of every Redis key (default shardlimit:demo:)
//	-flush         how often counts are exchanged with Redis (default 50ms)
//	-metrics       serve /metrics and /status on this address instead of -addr
//
// SIGHUP reloads the rules file, keeping the counters of unchanged rules
// (and of rules that come back within their window); a file that does not
// parse, or holds no rule without saying "limiting": "off", is refused and
// the rules in force stay. SIGINT and SIGTERM shut the server down
// gracefully.
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/fasthttpmw"
	"github.com/shardlimit/shardlimit/httplimit"
	shardsync "github.com/shardlimit/shardlimit/sync"
)

//go:embed rules.json
var seedRules []byte

// main runs the demo; it exits with status 0 after a clean shutdown or
// -h (the usage goes to stderr), 2 after any other error.
func main() {
	err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr, nil)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "shardlimit-demo:", err)
		os.Exit(2)
	}
}

// hooks replace the process-wide parts of run in tests.
type hooks struct {
	clock    shardlimit.Clock                        // decision time; nil: a system clock
	signals  chan os.Signal                          // instead of signal.Notify
	ready    func(addr net.Addr)                     // called once the server listens
	obsReady func(addr net.Addr)                     // called once the -metrics server listens
	reloaded func(err error)                         // called after each SIGHUP
	server   func(*fasthttp.Server)                  // adjusts the server before it starts
	limiter  func(rule string, l shardlimit.Limiter) // sees each Redis-shared limiter built
	exact    time.Duration                           // Timeout of the GCRA rules' sync.Exact; 0: its default
}

// run parses args, serves until ctx is done or a terminating signal
// arrives, and returns nil after a clean shutdown.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, h *hooks) error {
	fs := flag.NewFlagSet("shardlimit-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "listen `address`")
	rulesPath := fs.String("rules", "", "JSON rules `file` (default: the embedded cmd/shardlimit-demo/rules.json)")
	algName := fs.String("algorithm", "fixed_window", "`algorithm` of rules that name none: fixed_window, sliding_log, sliding_counter or gcra")
	redisAddr := fs.String("redis", "", "`host:port` of a Redis server sharing the counters between demo servers (default: in memory only)")
	redisPrefix := fs.String("redis-prefix", "shardlimit:demo:", "`prefix` of every Redis key; each rule's keys start with <prefix><rule name>:")
	flush := fs.Duration("flush", shardsync.DefaultFlushInterval, "`interval` between exchanges of counts with Redis, in [1ms, 1m]")
	metricsAddr := fs.String("metrics", "", "listen `address` of /metrics and /status (default: served on -addr)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	alg, err := shardlimit.ParseAlgorithm(*algName)
	if err != nil {
		return err
	}
	if h == nil {
		h = &hooks{}
	}
	load := func() (*httplimit.Rules, error) {
		if *rulesPath == "" {
			return httplimit.ParseRules(seedRules)
		}
		return httplimit.LoadRules(*rulesPath)
	}
	rules, err := load()
	if err != nil {
		return err
	}
	var sh *redisSync
	if *redisAddr != "" {
		if sh, err = newRedisSync(*redisAddr, *redisPrefix, *flush, stderr); err != nil {
			return err
		}
		sh.built = h.limiter
		sh.exactTimeout = h.exact
		defer sh.close()
	}
	mw, err := newMiddleware(rules, alg, h.clock, sh)
	if err != nil {
		return err
	}
	defer mw.Close() // before sh.close: the limiters' last flush needs the client

	counters := "in memory"
	if sh != nil {
		counters = fmt.Sprintf("shared through Redis at %s under %s", *redisAddr, *redisPrefix)
	}
	obs := observe(mw, counters)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	var obsLn net.Listener
	mainObs := obs
	if *metricsAddr != "" {
		if obsLn, err = net.Listen("tcp", *metricsAddr); err != nil {
			ln.Close()
			return fmt.Errorf("-metrics: %w", err)
		}
		mainObs = func([]byte) fasthttp.RequestHandler { return nil }
	}
	srv := newServer(router(mw.Wrap(app), mainObs), h)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	src := "embedded rules.json"
	if *rulesPath != "" {
		src = *rulesPath
	}
	fmt.Fprintf(stdout, "shardlimit-demo listening on http://%s (rules: %s, default algorithm %s, counters %s)\n", ln.Addr(), src, alg, counters)
	fmt.Fprintf(stdout, "try: curl -i -H 'X-Client-ID: client-1' http://%s/foo\n", ln.Addr())
	obsAddr := ln.Addr()
	if obsLn != nil {
		obsSrv := newServer(func(ctx *fasthttp.RequestCtx) {
			if hd := obs(ctx.Path()); hd != nil {
				hd(ctx)
				return
			}
			ctx.Error("not found\n", fasthttp.StatusNotFound)
		}, h)
		obsServed := make(chan error, 1)
		go func() { obsServed <- obsSrv.Serve(obsLn) }()
		defer func() {
			if err := shutdown(obsSrv, obsServed); err != nil {
				fmt.Fprintf(stderr, "-metrics server: %v\n", err)
			}
		}()
		obsAddr = obsLn.Addr()
	}
	fmt.Fprintf(stdout, "metrics: http://%s/metrics, status: http://%s/status\n", obsAddr, obsAddr)
	if obsLn != nil && h.obsReady != nil {
		h.obsReady(obsLn.Addr())
	}
	if h.ready != nil {
		h.ready(ln.Addr())
	}

	sigs := h.signals
	if sigs == nil {
		sigs = make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM)
		defer signal.Stop(sigs)
	}
	for {
		select {
		case <-ctx.Done():
			return shutdown(srv, served)
		case err := <-served:
			return err
		case sig := <-sigs:
			if sig != syscall.SIGHUP {
				fmt.Fprintf(stdout, "%v: shutting down\n", sig)
				return shutdown(srv, served)
			}
			r, err := load()
			if err == nil {
				err = mw.Reload(r)
			}
			if err != nil {
				fmt.Fprintf(stderr, "SIGHUP: rules not reloaded: %v\n", err)
			} else if r.Limiting == httplimit.LimitingOff {
				fmt.Fprintf(stdout, "SIGHUP: rules reloaded from %s: limiting is off, as the file says\n", src)
			} else {
				fmt.Fprintf(stdout, "SIGHUP: rules reloaded from %s (%d rules)\n", src, mw.Stats().Rules)
			}
			if h.reloaded != nil {
				h.reloaded(err)
			}
		}
	}
}

// newMiddleware builds the demo's middleware: the clients the rules list
// keyed by X-Client-ID, everyone else by address; the X-RateLimit trio, the
// IETF fields, the verbose pair and Retry-After. With sh, every rule's
// limiter shares its counts through Redis.
func newMiddleware(rules *httplimit.Rules, alg shardlimit.Algorithm, clock shardlimit.Clock, sh *redisSync) (*fasthttpmw.Middleware, error) {
	keys := httplimit.KeyConfig{
		Header: "X-Client-ID",
		// The header is not authenticated: an identity the rules do not
		// list is keyed by address, so rotating identities buys no budget.
		UnknownIdentity: httplimit.UnknownIdentityAnonymous,
	}
	o := httplimit.Options{
		Rules:            rules,
		Keys:             keys,
		Headers:          httplimit.HeaderConfig{IETF: true, Verbose: true}, // beside X-RateLimit-* and Retry-After
		DefaultAlgorithm: alg,
		Clock:            clock,
	}
	if sh != nil {
		o.NewLimiter = sh.newLimiter
	}
	return fasthttpmw.New(fasthttpmw.Config{Options: o})
}

// redisSync builds the rules' limiters on one Redis client.
type redisSync struct {
	client *redis.Client
	prefix string
	flush  time.Duration
	log    io.Writer
	built  func(rule string, l shardlimit.Limiter) // if set, sees each limiter built

	exactTimeout time.Duration // ExactConfig.Timeout; 0: DefaultTimeout
}

// newRedisSync connects to the Redis at addr. A Redis that does not answer
// is reported on log, not refused: the limiters decide locally until it
// answers.
func newRedisSync(addr, prefix string, flush time.Duration, log io.Writer) (*redisSync, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("-redis %q: %w", addr, err)
	}
	if flush < time.Millisecond || flush > time.Minute {
		return nil, fmt.Errorf("-flush %v outside [1ms, 1m]", flush)
	}
	client := redis.NewClient(&redis.Options{
		Addr: addr,
		// As package sync recommends: no blind re-sends of a counter
		// increment, and deadlines that end the socket calls.
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		// One dial attempt per command: go-redis's default of five, 100 ms
		// apart, would turn a refused connection into a timeout.
		DialerRetries: 1,
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		fmt.Fprintf(log, "redis at %s not answering (%v): deciding locally until it does\n", addr, err)
	}
	return &redisSync{client: client, prefix: prefix, flush: flush, log: log}, nil
}

// newLimiter is the middleware's Options.NewLimiter: a sync.Shared for the
// window algorithms, a sync.Exact for GCRA, with keys under
// <prefix><rule name>: (the name path-escaped, so a brace cannot move the
// Redis Cluster hash tag).
func (sh *redisSync) newLimiter(rule string, cfg shardlimit.Config) (shardlimit.Limiter, error) {
	prefix := sh.prefix + url.PathEscape(rule) + ":"
	logChange := func(c shardsync.StateChange) {
		if c.Err != nil {
			fmt.Fprintf(sh.log, "rule %q: redis sync %s -> %s: %v\n", rule, c.From, c.To, c.Err)
		} else {
			fmt.Fprintf(sh.log, "rule %q: redis sync %s -> %s\n", rule, c.From, c.To)
		}
	}
	var l shardlimit.Limiter
	var err error
	if cfg.Algorithm == shardlimit.GCRA {
		l, err = shardsync.NewExact(sh.client, shardsync.ExactConfig{Config: cfg, Prefix: prefix, Timeout: sh.exactTimeout, OnStateChange: logChange})
	} else {
		l, err = shardsync.NewShared(sh.client, shardsync.SharedConfig{
			Config:        cfg,
			Prefix:        prefix,
			FlushInterval: sh.flush,
			// A healthy flush takes about a millisecond; a shutdown with Redis
			// unreachable waits this long per rule.
			FlushTimeout:  500 * time.Millisecond,
			OnStateChange: logChange,
		})
	}
	if err != nil {
		return nil, err
	}
	if sh.built != nil {
		sh.built(rule, l)
	}
	return l, nil
}

func (sh *redisSync) close() { _ = sh.client.Close() }

// shutdown stops srv gracefully (in-flight requests finish, for at most 5 s)
// and waits for Serve to return.
func shutdown(srv *fasthttp.Server, served <-chan error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.ShutdownWithContext(ctx)
	if serr := <-served; err == nil {
		err = serr
	}
	return err
}

// newServer returns the demo's fasthttp server for handler.
func newServer(handler fasthttp.RequestHandler, h *hooks) *fasthttp.Server {
	srv := &fasthttp.Server{
		Handler:      handler,
		Name:         "shardlimit-demo",
		ReadTimeout:  10 * time.Second,
		WriteTimeout: 10 * time.Second,
		IdleTimeout:  time.Minute,
	}
	if h.server != nil {
		h.server(srv)
	}
	return srv
}

// router sends /healthz, and the paths obs serves (/metrics and /status
// unless -metrics moved them), around the limiter.
func router(limited fasthttp.RequestHandler, obs func(path []byte) fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/healthz" {
			ctx.SetContentType("text/plain; charset=utf-8")
			ctx.SetBodyString("ok\n")
			return
		}
		if hd := obs(ctx.Path()); hd != nil {
			hd(ctx)
			return
		}
		limited(ctx)
	}
}

// app is the limited application: /foo and /bar.
func app(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("text/plain; charset=utf-8")
	switch string(ctx.Path()) {
	case "/foo":
		ctx.SetBodyString("foo: ok\n")
	case "/bar":
		ctx.SetBodyString("bar: ok\n")
	default:
		ctx.SetStatusCode(fasthttp.StatusNotFound)
		ctx.SetBodyString("not found\n")
	}
}
