// Command shardlimit-demo is a fasthttp server limited by shardlimit's
// middleware, to see the limits, headers and 429s with curl:
//
//	go run ./cmd/shardlimit-demo -metrics 127.0.0.1:9090
//	curl -i -H 'X-Client-ID: client-1' http://127.0.0.1:8080/foo
//	curl -i http://127.0.0.1:8080/bar        # no X-Client-ID: keyed by IP
//	curl -i -H 'X-Client-ID: rot1' http://127.0.0.1:8080/bar  # unlisted: by IP too
//	curl -i http://127.0.0.1:8080/healthz    # never limited
//	curl -s http://127.0.0.1:9090/status     # the admin address only
//
// Routes: /foo, /bar, /baz and /smooth answer 200 with a short body and
// are limited by the rules; /healthz answers 200 and is not limited;
// anything else is 404 (and limited only if a rule matches it). /metrics
// (the Prometheus text format, which holds no client key) and /status (a
// page for people: the rules, their limits and counters, the state of
// Redis, the most-denied clients) are not limited and are served on the
// operator's admin listener, -metrics. /status names clients by address
// and identity, so it is served on the public address -addr only with
// -status-public, whatever the address (a loopback -addr included: a
// rule that depended on the address would leak once the demo listens on
// a public one); without -metrics it is not served, and /metrics is served
// on -addr. Clients identify with the X-Client-ID
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
// Every client (client-1, client-2 and each address) may call /baz 3 times
// a second and 10 times a minute (fixed windows, both checked on every
// request): three quick calls pass, a fourth in the same second is 429 with
// Retry-After: 1, and the eleventh of a minute is 429 until the minute
// ends.
//
//	curl -i http://127.0.0.1:8080/baz   # RateLimit-Policy: "baz-1s";q=3;w=1, "baz-1m";q=10;w=60
//
// Every client may call /smooth 6 times a minute by GCRA: a burst of 6,
// then one every 10 s (with -redis, decided in Redis by sync.Exact).
//
// The seed rules' policies (httplimit.Rules.Exempt, Deny, Rule.Shadow):
// the address 127.0.0.2 is exempt, never limited and sent no rate-limit
// field; the address 127.0.0.3 and the identity blocked-client are
// denied, 403 Forbidden on every route behind the middleware; and the
// shadow rule baz-try tries 5 a minute on /baz beside the enforced 3 a
// second and 10 a minute, counting what it would deny (/status lists it
// under "shadow rules", /metrics as outcome would_deny) while /baz
// answers per the enforced rule alone:
//
//	curl -i --interface 127.0.0.2 http://127.0.0.1:8080/foo   # exempt: no X-RateLimit fields, never 429
//	curl -i --interface 127.0.0.3 http://127.0.0.1:8080/foo   # 403 Forbidden (deny list)
//	curl -i -H 'X-Client-ID: blocked-client' http://127.0.0.1:8080/foo  # 403 too
//
// /login allows 3 calls a minute per client, and bans a client denied 3
// times within a minute for 15 minutes (429 with Retry-After the rest of
// the ban), twice as long at each repeat offence up to 24 hours; /status
// lists the bans in force. With -redis the bans are shared: a client
// banned by one demo server is banned by all within -flush, and stays
// banned across their restarts.
//
//	for i in 1 2 3 4 5 6 7; do curl -s -o /dev/null -w '%{http_code} ' http://127.0.0.1:8080/login; done
//
// /report (60 a minute) lets a client have at most 2 requests in flight
// (503 with Retry-After: 1 beyond, in-process per server); ?ms=N makes it
// take N milliseconds, at most 10000, to see the cap:
//
//	for i in 1 2 3; do curl -s -o /dev/null -w '%{http_code} ' 'http://127.0.0.1:8080/report?ms=2000' & done; wait
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
// round trip (at most 50 ms) per request, exact across servers. A rule of
// several limits (/baz) shares each of them. Rules never share counters:
// the middleware namespaces every rule's keys by its name
// (httplimit.KeyNamespace), and so that a person can tell them apart each
// rule's Redis keys also start with <-redis-prefix><rule name>:, as in
// shardlimit:demo:anon-foo:{d3a36353:ip:192.0.2.1}:29936051. If Redis is
// down, slow, answers garbage or evicts keys, every limiter decides locally
// (limits then hold per server) and returns to sharing when Redis is sound
// again. Every reply from Redis is bounded (sync.LimitReplies).
//
// Logs go to stderr (log/slog, text), each message at most 10 times in a
// row and then once per 10 s, so no fault and no client can flood them:
// one line when Redis sync degrades (with the cause: unreachable, rejected,
// bad replies, evicting keys) and one when it is healthy again; once, a
// Redis maxmemory-policy that can evict the counters, or an INFO the
// limiters may not run; a summary of Redis errors at most every 10 s;
// go-redis's own log and fasthttp's connection errors (without request
// contents) under the same budget.
//
//	go run ./cmd/shardlimit-demo -addr 127.0.0.1:8080 -redis 127.0.0.1:6379 &
//	go run ./cmd/shardlimit-demo -addr 127.0.0.1:8081 -redis 127.0.0.1:6379 &
//
// Flags:
//
//	-addr          listen address (default 127.0.0.1:8080)
//	-rules         JSON rules file (default: the embedded copy of rules.json)
//	-algorithm     algorithm of the rules that name none; a rule that names one
//	               keeps it, and the startup lines say which rules it applied
//	               to (default fixed_window; every seed rule names its own)
//	-redis         host:port of a Redis sharing the counters (default: none, in memory)
//	-redis-prefix  start of every Redis key (default shardlimit:demo:)
//	-flush         how often counts are exchanged with Redis (default 50ms)
//	-metrics       the operator's admin address, serving /metrics and /status
//	               (default: none; /metrics on -addr, /status not served)
//	-status-public serve /status on -addr too (default off)
//	-metrics-group rule (one series set per rule), all (one for every rule)
//	               or tier (one per client tier): see package metrics
//
// The rules file is read by httplimit.LoadRules: a key given twice, a
// window under 1 ms or a file beyond the caps (1 MiB, 1,000 rules, names
// of 128 bytes: httplimit.MaxRulesFileBytes and the constants beside it)
// is refused with an error naming the rule or the cap.
//
// SIGHUP reloads the rules file, keeping the counters of unchanged rules
// (and of rules that come back within their window); a file that does not
// parse (or is refused as above), or holds no rule without saying
// "limiting": "off", is refused and the rules in force stay. SIGINT and
// SIGTERM shut the server down gracefully.
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	stdsync "sync"
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
	built    func(*fasthttpmw.Middleware)            // sees the middleware built
}

// run parses args, serves until ctx is done or a terminating signal
// arrives, and returns nil after a clean shutdown.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, h *hooks) error {
	fs := flag.NewFlagSet("shardlimit-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "listen `address`")
	rulesPath := fs.String("rules", "", "JSON rules `file` (default: the embedded cmd/shardlimit-demo/rules.json)")
	algName := fs.String("algorithm", "fixed_window", "`algorithm` of the rules that name none (a rule that names one keeps it; the startup lines say which rules it applied to): fixed_window, sliding_log, sliding_counter or gcra")
	redisAddr := fs.String("redis", "", "`host:port` of a Redis server sharing the counters between demo servers (default: in memory only)")
	redisPrefix := fs.String("redis-prefix", "shardlimit:demo:", "`prefix` of every Redis key; each rule's keys start with <prefix><rule name>:")
	flush := fs.Duration("flush", shardsync.DefaultFlushInterval, "`interval` between exchanges of counts with Redis, in [1ms, 1m]")
	metricsAddr := fs.String("metrics", "", "listen `address` of the operator's admin listener, serving /metrics and /status (default: none; /metrics is then served on -addr and /status nowhere)")
	statusPublic := fs.Bool("status-public", false, "serve /status, which lists the most-denied clients by address and identity, on -addr too (default: only on -metrics)")
	metricsGroup := fs.String("metrics-group", "rule", "how /metrics reports the rules: `rule` (one series set per rule, about 14 series each), all (summed into one set) or tier (one per client tier)")
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
	group, err := metricsGrouping(*metricsGroup)
	if err != nil {
		return err
	}
	if h == nil {
		h = &hooks{}
	}
	log := newLogger(stderr)
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
		if sh, err = newRedisSync(*redisAddr, *redisPrefix, *flush, log); err != nil {
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
	if h.built != nil {
		h.built(mw)
	}

	counters := "in memory"
	if sh != nil {
		counters = fmt.Sprintf("shared through Redis at %s under %s", *redisAddr, *redisPrefix)
	}
	metricsHandler, statusHandler := observe(mw, counters, group)
	// /status lists clients by address and identity: it is served on the
	// operator's admin listener (-metrics), and on -addr only if the
	// operator asks (-status-public). /metrics holds no client key.
	admin := map[string]fasthttp.RequestHandler{"/metrics": metricsHandler, "/status": statusHandler}
	public := map[string]fasthttp.RequestHandler{}
	if *metricsAddr == "" {
		public["/metrics"] = metricsHandler
	}
	if *statusPublic {
		public["/status"] = statusHandler
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	var obsLn net.Listener
	if *metricsAddr != "" {
		if obsLn, err = net.Listen("tcp", *metricsAddr); err != nil {
			ln.Close()
			return fmt.Errorf("-metrics: %w", err)
		}
	}
	srv := newServer(router(mw.Wrap(app), public), h, log)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	src := "embedded rules.json"
	if *rulesPath != "" {
		src = *rulesPath
	}
	fmt.Fprintf(stdout, "shardlimit-demo listening on http://%s (rules: %s, counters %s)\n", ln.Addr(), src, counters)
	fmt.Fprintln(stdout, algorithmNote(alg, rules))
	fmt.Fprintf(stdout, "try: curl -i -H 'X-Client-ID: client-1' http://%s/foo\n", ln.Addr())
	if obsLn != nil {
		obsSrv := newServer(func(ctx *fasthttp.RequestCtx) {
			if hd := admin[string(ctx.Path())]; hd != nil {
				hd(ctx)
				return
			}
			ctx.Error("not found\n", fasthttp.StatusNotFound)
		}, h, log)
		obsServed := make(chan error, 1)
		go func() { obsServed <- obsSrv.Serve(obsLn) }()
		defer func() {
			if err := shutdown(obsSrv, obsServed); err != nil {
				fmt.Fprintf(stderr, "-metrics server: %v\n", err)
			}
		}()
		fmt.Fprintf(stdout, "metrics: http://%s/metrics, status: http://%s/status\n", obsLn.Addr(), obsLn.Addr())
	} else {
		fmt.Fprintf(stdout, "metrics: http://%s/metrics\n", ln.Addr())
	}
	switch {
	case *statusPublic:
		fmt.Fprintf(stdout, "status: also http://%s/status (-status-public: anyone reaching this address sees the clients' addresses and identities)\n", ln.Addr())
	case obsLn == nil:
		fmt.Fprintln(stdout, "status: not served; it lists clients by address and identity: give -metrics <admin address> to see it there")
	}
	if obsLn != nil && h.obsReady != nil {
		h.obsReady(obsLn.Addr())
	}
	if h.ready != nil {
		h.ready(ln.Addr())
	}

	stop := func() error {
		err := shutdown(srv, served)
		if sh != nil {
			// Within a bound whatever Redis does: the limiters' last
			// flushes, all at once.
			sh.shutdown(2 * time.Second)
		}
		return err
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
			return stop()
		case err := <-served:
			return err
		case sig := <-sigs:
			if sig != syscall.SIGHUP {
				fmt.Fprintf(stdout, "%v: shutting down\n", sig)
				return stop()
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
				fmt.Fprintln(stdout, algorithmNote(alg, r))
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
		if err := sh.shareBans(&o); err != nil {
			return nil, err
		}
	}
	return fasthttpmw.New(fasthttpmw.Config{Options: o})
}

// redisSync builds the rules' limiters on one Redis client and reports
// what they see of Redis.
type redisSync struct {
	client *redis.Client
	prefix string
	flush  time.Duration
	log    *slog.Logger
	built  func(rule string, l shardlimit.Limiter) // if set, sees each limiter built

	exactTimeout time.Duration // ExactConfig.Timeout; 0: DefaultTimeout

	mu    stdsync.Mutex
	lims  map[string]shardlimit.Limiter // by rule, the latest built
	down  map[string]bool               // rules degraded
	since time.Time                     // when the first of them degraded

	stop chan struct{} // ends watch
	done chan struct{}
}

// newRedisSync connects to the Redis at addr. A Redis that does not answer
// is reported on log, not refused: the limiters decide locally until it
// answers.
func newRedisSync(addr, prefix string, flush time.Duration, log *slog.Logger) (*redisSync, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("-redis %q: %w", addr, err)
	}
	if flush < time.Millisecond || flush > time.Minute {
		return nil, fmt.Errorf("-flush %v outside [1ms, 1m]", flush)
	}
	// go-redis logs a failed dial for every command while Redis is down.
	redis.SetLogger(redisLog{log})
	opt := &redis.Options{
		Addr: addr,
		// As package sync recommends: no blind re-sends of a counter
		// increment, deadlines that end the socket calls, and replies
		// bounded in size.
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		// One dial attempt per command: go-redis's default of five, 100 ms
		// apart, would turn a refused connection into a timeout.
		DialerRetries: 1,
	}
	opt.Dialer = shardsync.LimitReplies(redis.NewDialer(opt), 0)
	client := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		log.Warn("redis not answering: deciding locally until it does", "addr", addr, "err", err)
	}
	sh := &redisSync{client: client, prefix: prefix, flush: flush, log: log,
		lims: make(map[string]shardlimit.Limiter), down: make(map[string]bool),
		stop: make(chan struct{}), done: make(chan struct{})}
	go sh.watch(time.Second)
	return sh, nil
}

// newLimiter is the middleware's Options.NewLimiter: a sync.Shared for the
// window algorithms, a sync.Exact for GCRA, with keys under
// <prefix><rule name>: (the name path-escaped, so a brace cannot move the
// Redis Cluster hash tag). The middleware namespaces each rule's keys
// itself, so the rule's name in the prefix is only for people reading
// Redis.
func (sh *redisSync) newLimiter(rule string, cfg shardlimit.Config) (shardlimit.Limiter, error) {
	prefix := sh.prefix + url.PathEscape(rule) + ":"
	logChange := func(c shardsync.StateChange) { sh.stateChange(rule, c) }
	var l shardlimit.Limiter
	var err error
	if cfg.Algorithm == shardlimit.GCRA {
		l, err = shardsync.NewExact(sh.client, shardsync.ExactConfig{Config: cfg, Prefix: prefix, Timeout: sh.exactTimeout, OnStateChange: logChange})
	} else {
		l, err = shardsync.NewShared(sh.client, shardsync.SharedConfig{
			Config:        cfg,
			Prefix:        prefix,
			FlushInterval: sh.flush,
			// A healthy flush takes about a millisecond.
			FlushTimeout:  500 * time.Millisecond,
			OnStateChange: logChange,
		})
	}
	if err != nil {
		return nil, err
	}
	sh.mu.Lock()
	sh.lims[rule] = l
	sh.mu.Unlock()
	if sh.built != nil {
		sh.built(rule, l)
	}
	return l, nil
}

// stateChange logs one line when the first rule's limiter degrades, with
// its cause, and one when the last is healthy again: one line each per
// episode, however many rules share Redis.
func (sh *redisSync) stateChange(rule string, c shardsync.StateChange) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if c.To == shardsync.Degraded {
		if len(sh.down) == 0 {
			sh.since = c.At
			sh.log.Warn("redis sync degraded: limits decided locally", "rule", rule, "cause", cause(c.Err), "err", c.Err)
		}
		sh.down[rule] = true
		return
	}
	if !sh.down[rule] {
		return
	}
	delete(sh.down, rule)
	if len(sh.down) == 0 {
		sh.log.Info("redis sync healthy again", "after", c.At.Sub(sh.since).Round(time.Millisecond))
	}
}

// cause names the kind of a store error.
func cause(err error) string {
	switch {
	case errors.Is(err, shardsync.ErrEvicting):
		return "evicting keys"
	case errors.Is(err, shardsync.ErrBadReply):
		return "bad reply"
	case errors.Is(err, shardsync.ErrRejected):
		return "rejected"
	case errors.Is(err, shardsync.ErrUnavailable):
		return "unavailable"
	}
	return "other"
}

// storeStats is what watch reads of one limiter.
type storeStats struct {
	errors, badReplies uint64
	last               error
	eviction           shardsync.Eviction
}

func statsOf(l shardlimit.Limiter) (storeStats, bool) {
	switch l := l.(type) {
	case *shardsync.Shared:
		st := l.SharedStats()
		return storeStats{st.ItemErrors, st.BadReplies, st.LastError, st.Eviction}, true
	case *shardsync.Exact:
		st := l.ExactStats()
		return storeStats{st.Errors, st.BadReplies, st.LastError, st.Eviction}, true
	}
	return storeStats{}, false
}

// watch reads the limiters' stats every period until close and logs, once
// each, a maxmemory-policy that can evict the counters and an INFO the
// limiters may not run, and, at most once per logEvery, how many Redis
// calls failed since the last such line (errors that change no state
// included: rejected commands, unreadable replies) with the last error.
func (sh *redisSync) watch(period time.Duration) {
	defer close(sh.done)
	t := time.NewTicker(period)
	defer t.Stop()
	var policyLogged, infoLogged bool
	var errs, bad uint64 // as of the last summary
	var summary time.Time
	for {
		select {
		case <-sh.stop:
			return
		case <-t.C:
		}
		sh.mu.Lock()
		var sum storeStats
		var ev shardsync.Eviction
		for _, l := range sh.lims {
			st, ok := statsOf(l)
			if !ok {
				continue
			}
			sum.errors += st.errors
			sum.badReplies += st.badReplies
			if st.last != nil {
				sum.last = st.last
			}
			if st.eviction.Policy != "" && !st.eviction.Safe() || st.eviction.Err != nil {
				ev = st.eviction
			}
		}
		sh.mu.Unlock()
		if !policyLogged && ev.Policy != "" && !ev.Safe() {
			policyLogged = true
			sh.log.Warn("redis can evict the limiters' counters: use maxmemory-policy noeviction", "policy", ev.Policy, "maxmemory", ev.MaxMemory)
		}
		if !infoLogged && ev.Err != nil {
			infoLogged = true
			sh.log.Warn("redis eviction not watched", "err", ev.Err)
		}
		// Counters of limiters rebuilt on SIGHUP start again from 0.
		if sum.errors < errs || sum.badReplies < bad {
			errs, bad = sum.errors, sum.badReplies
		}
		if sum.errors > errs && time.Since(summary) >= logEvery {
			sh.log.Warn("redis errors", "calls", sum.errors-errs, "bad_replies", sum.badReplies-bad, "last", sum.last)
			errs, bad, summary = sum.errors, sum.badReplies, time.Now()
		}
	}
}

// shutdown shuts every limiter built down at once, within d whatever Redis
// does.
func (sh *redisSync) shutdown(d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	sh.mu.Lock()
	lims := make(map[string]shardlimit.Limiter, len(sh.lims))
	for rule, l := range sh.lims {
		lims[rule] = l
	}
	sh.mu.Unlock()
	var wg stdsync.WaitGroup
	for rule, l := range lims {
		wg.Go(func() {
			var err error
			switch l := l.(type) {
			case *shardsync.Shared:
				err = l.Shutdown(ctx)
			case *shardsync.Exact:
				err = l.Shutdown(ctx)
			}
			if err != nil {
				sh.log.Warn("redis sync: shutdown incomplete", "rule", rule, "err", err)
			}
		})
	}
	wg.Wait()
}

// close stops watch and closes the client.
func (sh *redisSync) close() {
	close(sh.stop)
	<-sh.done
	_ = sh.client.Close()
}

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
func newServer(handler fasthttp.RequestHandler, h *hooks, log *slog.Logger) *fasthttp.Server {
	srv := &fasthttp.Server{
		Handler:      handler,
		Name:         "shardlimit-demo",
		ReadTimeout:  10 * time.Second,
		WriteTimeout: 10 * time.Second,
		IdleTimeout:  time.Minute,
		// Connection errors through the log budget, without the request
		// bytes a client chose.
		Logger:                serverLog{log},
		SecureErrorLogMessage: true,
	}
	if h.server != nil {
		h.server(srv)
	}
	return srv
}

// router sends /healthz, and the paths in obs (/metrics unless -metrics
// moved it, /status with -status-public), around the limiter.
func router(limited fasthttp.RequestHandler, obs map[string]fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/healthz" {
			ctx.SetContentType("text/plain; charset=utf-8")
			ctx.SetBodyString("ok\n")
			return
		}
		if hd := obs[string(ctx.Path())]; hd != nil {
			hd(ctx)
			return
		}
		limited(ctx)
	}
}

// app is the limited application: /foo, /bar, /baz, /smooth, /login and
// /report.
func app(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("text/plain; charset=utf-8")
	switch string(ctx.Path()) {
	case "/foo":
		ctx.SetBodyString("foo: ok\n")
	case "/bar":
		ctx.SetBodyString("bar: ok\n")
	case "/baz":
		ctx.SetBodyString("baz: ok\n")
	case "/smooth":
		ctx.SetBodyString("smooth: ok\n")
	case "/login", "/report":
		policyApp(ctx)
	default:
		ctx.SetStatusCode(fasthttp.StatusNotFound)
		ctx.SetBodyString("not found\n")
	}
}

// algorithmNote says which rules -algorithm applied to: those of rules that
// name no algorithm; a rule that names one keeps it.
func algorithmNote(alg shardlimit.Algorithm, rules *httplimit.Rules) string {
	var names []string
	all := 0
	add := func(rs []httplimit.Rule) {
		all += len(rs)
		for _, r := range rs {
			if r.Algorithm == 0 {
				names = append(names, r.Name)
			}
		}
	}
	add(rules.Rules)
	for _, tier := range rules.Tiers {
		add(tier.Rules)
	}
	if all == 0 {
		return fmt.Sprintf("-algorithm %s: applied to no rule (there are none)", alg)
	}
	if len(names) == 0 {
		return fmt.Sprintf("-algorithm %s: applied to no rule (every rule names its algorithm)", alg)
	}
	return fmt.Sprintf("-algorithm %s: applied to the rules that name none: %s", alg, strings.Join(names, ", "))
}
