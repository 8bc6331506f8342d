package sync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	stdsync "sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardlimit/shardlimit"
)

// Exact is a shardlimit.Limiter that decides every request with one Lua
// script in Redis, so every process sharing the Redis shares one exact limit
// per key: the fixed window counter, the sliding window counter (the
// oldest bucket weighted, integer arithmetic) or GCRA, as Config.Algorithm
// says, with the same Result semantics as the in-process limiters.
//
// Several rates (Config.Rates, say 3 per second and 100 per hour) are
// decided by the same one script call, atomically: it reads and checks
// every rate, then consumes the cost from all of them or, if any rate
// denies, from none. Each rate's state is a Redis key of its own under the
// limiter key's hash tag, so all of them live in one Redis Cluster slot.
// The Result reports the binding rate as the in-process limiters do (the
// least remaining, ties to the longest window; Result.Window names it),
// and RetryAfter is the first instant at which every rate admits the
// request.
//
// Clock: the scripts decide at the Redis server's TIME, not at the now
// passed to AllowN. With several processes, one clock is what makes the
// limit exact: windows, buckets and GCRA's theoretical arrival times would
// otherwise move with every process's clock error, and a process whose clock
// lags could spend a window that the others have left. The now argument (and
// Config.Clock in the short forms) is used only by the local fallback and to
// record admitted units in it. Durations in a Result are exact to the
// microsecond, Redis TIME's resolution.
//
// If the Redis server's clock steps back (its host's clock is set back, or
// a replica with a slower clock is promoted), the scripts keep counting the
// units stored under the later time: they never admit more than the limit,
// and a wait can grow by at most the step.
//
// Each decision is one round trip bounded by ExactConfig.Timeout, whatever
// the client's options (see the package doc). A call that fails is decided
// by the FailurePolicy. When calls keep failing with transport errors
// (timeout, refused or broken connection) for ExactConfig.DegradeAfter, at
// least three in a row (a call and the background goroutine's checks of
// the store after it count alike), the limiter becomes Degraded: every call is then
// decided by the policy without touching Redis, until the probe (PING with
// exponential back-off, sent by the background goroutine of the client's
// limiters, see the package doc) reaches Redis again. One slow call on a
// loaded host does not degrade it; more than DegradePercent of its
// decisions over a HealthInterval made by the policy do (see the package
// doc on health). While Healthy every decision by Redis is also recorded
// in the local fallback: the units Redis admitted this process, and at
// least its fair share of the cluster's usage, ceil(c*F/L) of the binding
// rate (c the units Redis counts for every process, L its limit, F the
// fallback's), charged with Settle, so switching to it continues from this
// process's usage or its share of everyone's, whichever is more, never
// from a fresh budget (about 100 ns per decision). Every unit this process
// is granted, by Redis or by the policy, is also recorded in a journal
// (ExactConfig.JournalKeys) while it still counts; when Redis answers
// again the limiter stays Degraded, deciding by the policy, until it has
// sent Redis the units the policy granted (and, if Redis may have lost
// state: it restarted, or evicted keys, every unit of the journal), added
// unconditionally at their instants. So a recovered Redis counts them and
// never grants a window's limit on top of them: N processes with fallback
// limit F (default: the limit L) admit at most max(N*F, L) plus F/L of
// the units each process had not seen granted to the others (those since
// its last decision by Redis) in a window an outage overlaps, whatever the
// spread of the traffic, and never more than N*L with F <= L: so N*L with
// the default fallback, about L with F = L/N (see the package doc on
// outages for the derivation, several rates, evictions not yet noticed
// and processes that recover at different times). A timed-out call may
// still have consumed its units in Redis; if the policy admits the
// request too, its units
// count twice once replayed (the stricter side). From a call that fails
// with a transport error on, the limiter decides by the policy until the
// background goroutine has checked Redis's INFO for a restart and sent the
// units the policy granted (all of the journal's after a restart), so a
// Redis restarted empty never decides before it counts them; a failure
// now and then costs one such check (an INFO and a replay, milliseconds)
// and does not degrade the limiter. With a Cluster client the limiter is degraded as a whole while any master is
// unreachable, and a transport error also asks the client to reload its
// slot map. Errors that Redis answers (a key holding foreign data, a script
// denied by an ACL, OOM) and unreadable replies are decided by the policy
// too; they degrade the limiter only through its failure share: they are
// counted in ExactStats (Errors, BadReplies) and the last one is kept,
// with its cause, in ExactStats.LastError.
//
// State keys (see the package doc) are written only when a request is
// admitted, always with a TTL: the time the rate's state still matters
// (at most its window, plus one bucket for the sliding counter; longer
// only after a server clock step back) plus one second of slack. A denial
// or a Peek writes nothing. A key's state is named by its rate's window
// (and bucket), so a limiter whose windows or bucket count changed starts
// fresh state instead of misreading the old.
//
// Per-key limits (SetLimits) are kept in this process and sent with every
// call: configure them on every process.
//
// Deny cache: when Redis denies one unit of a key (cost 1, as Allow asks),
// no unit of it fits for any process until the denial's binding rate
// admits one, so no process can consume any and the key's state stands
// still: every request of one unit until then gets the same denial, its
// durations shorter by the time elapsed. Exact answers those requests
// in-process, with no round trip and no allocation, until that instant
// (at most the denial's RetryAfter) measured from the now of the denied
// call (read before it was sent, so never later in real time than Redis's
// instant). It never admits: at worst it denies what Redis would admit
// again, when units are given back before the instant. This process's
// refunds (Settle), Reset, SetLimits, ClearLimit and SetDefaultLimits end
// the key's cached denial at once; another process's refunds and Reset,
// and state Redis lost, reach it only at the instant (the strict side, a
// window's remainder at most). Requests of more than one unit, and
// denials with RetryAfter Never, always go to Redis. A now passed to
// AllowN later than the real time of the call makes the denial last
// longer in real time by as much. ExactConfig.DenyCacheKeys bounds it;
// ExactStats.DenyCacheHits counts what it answered. While the
// FailurePolicy decides (Degraded) the cache is not consulted.
//
// All methods are safe for concurrent use. Unlike the in-process limiters,
// every decision that calls Redis allocates: 20 to 21 times with go-redis
// v9 and one rate (redis_rate: 22), most of them go-redis's (its command,
// the boxed key, the reply and its integers), the rest the call's
// deadline, the goroutine that bounds it and the state key's name; the
// arguments are reused. Close and Shutdown leave the background goroutine
// (stopping it if this was the client's last limiter) and return within
// their deadline whatever Redis does.
type Exact struct {
	client     RedisClient
	cfg        shardlimit.Config // defaults filled in; the limits are the defaults' initial values
	rates      []exactRate       // in the order of Config.Rates (one if Rates is empty)
	longest    int               // index in rates of the longest window
	defaults   atomic.Pointer[defaultLimits]
	prefix     string
	script     *redis.Script // the algorithm's script
	charger    *redis.Script // the algorithm's charge script
	journal    *journal      // the units this process was granted (see journal)
	births     *births       // the states of keys it saw alive in the store (see births)
	deny       *denyCache    // the store's denials still in force (see denyCache)
	replayBuf  []charge      // the hub's, for replay
	timeout    time.Duration
	degrade    time.Duration // DegradeAfter
	policy     FailurePolicy
	fallback   shardlimit.Limiter
	ownFb      bool // fallback built here: Close closes it
	probeMin   time.Duration
	probeMax   time.Duration
	onChange   func(StateChange)
	hub        *hub          // the client's background (see hub)
	evictEvery time.Duration // how often the hub reads Redis's eviction state for it; 0: never

	// callerTime makes the scripts decide at AllowN's now instead of Redis
	// TIME. Tests set it to replay exact instants; it is not exported.
	callerTime bool
	latest     atomic.Int64 // the latest now given to a decision, Unix µs

	mu     stdsync.RWMutex
	limits map[string]limitSet // own limits (SetLimits)

	state  atomic.Int32
	bypass atomic.Bool // decide by the policy without calling Redis (an outage or eviction)
	busy   atomic.Bool // the hub has work for it: an outage, changes to report
	hot    atomic.Bool // the hub visits it (see hub.activateExact)
	left   atomic.Bool // it left the hub

	// The causes of the state and the changes the hub has yet to report.
	hmu        stdsync.Mutex
	outage     bool          // calls stopped reaching Redis; the hub probes it
	evicting   error         // Redis evicts keys
	share      *shareWatch   // the failure share
	events     []StateChange // to report, in order
	probeAt    time.Time     // of the next probe while outage
	probeDelay time.Duration // the probe's back-off
	replaying  bool          // deciding by the policy until the journal is replayed
	checking   bool          // after failed calls: the hub checks for a restart
	lost       bool          // the store may have lost state: replay every unit
	replayAt   time.Time     // of the next replay after one failed
	lossErr    error         // a reply proved a loss (see storeLoss); nil when none is held
	lossUntil  time.Time     // the hold of the last loss ends

	backoff atomic.Int64

	// The run of failed calls (transport errors) since the last call that
	// reached Redis: failing is read by every call that succeeds.
	failing  atomic.Bool
	runMu    stdsync.Mutex
	runStart time.Time // start of the run's first call; under runMu
	runCalls int       // calls in the run; under runMu

	allowed, denied, decisions        atomic.Uint64
	calls, errs, timeouts, policyDecs atomic.Uint64
	badReplies                        atomic.Uint64
	lastErr                           lastError
	trips, recoveries                 atomic.Uint64
	probes, probeFails                atomic.Uint64
	replays, replayFails, replayed    atomic.Uint64
	replayRejected                    atomic.Uint64
	lostUnits, losses                 atomic.Uint64

	// gate orders calls against Close: a call registers in inflight under
	// gate's read lock only while the limiter is open, and Close sets
	// closed under the write lock before it waits for inflight to reach 0
	// (drained is closed then).
	gate      stdsync.RWMutex
	inflight  atomic.Int64
	drained   chan struct{}
	drainOnce stdsync.Once

	closed    atomic.Bool
	closing   closeSignal // cancelled when Close begins, for WaitN
	closeOnce stdsync.Once
	closeErr  error
}

var _ shardlimit.Limiter = (*Exact)(nil)

// exactRate is one rate of an Exact limiter as its script takes it.
type exactRate struct {
	window time.Duration
	suffix string // of the rate's state key, after the hash tag
	params []any  // the script's arguments of the rate after its limit
}

// limitSet holds one limit per rate, in the order of Exact.rates.
type limitSet [shardlimit.MaxRates]int

// defaultLimits holds the default limits, and the same boxed as the
// decision scripts take them (a boxed int above 255 is an allocation).
type defaultLimits struct {
	lims  limitSet
	boxed [shardlimit.MaxRates]any
}

// newDefaultLimits returns ls as defaultLimits.
func newDefaultLimits(ls limitSet) *defaultLimits {
	d := &defaultLimits{lims: ls}
	for i, l := range ls {
		d.boxed[i] = l
	}
	return d
}

// NewExact returns an Exact limiter deciding through client. It does no I/O,
// so it returns at once whether or not Redis is reachable; the first call
// finds out. It joins the background goroutine of client's limiters (see
// the package doc), starting it if it is the first; call Close.
//
// It returns an error wrapping shardlimit.ErrInvalidConfig if client is nil,
// cfg.Algorithm is SlidingLog or unknown, any field is out of range, a
// window or bucket is not a whole number of microseconds, or a Fallback
// given does not have the same windows in the same order (its limits may
// differ).
func NewExact(client RedisClient, cfg ExactConfig) (*Exact, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil redis client", shardlimit.ErrInvalidConfig)
	}
	script, err := scriptFor(cfg.Algorithm)
	if err != nil {
		return nil, err
	}
	e := &Exact{client: client, script: script, charger: chargeScriptFor(cfg.Algorithm), limits: make(map[string]limitSet)}
	if err := e.configure(&cfg); err != nil {
		return nil, err
	}
	if err := e.configureLimiter(&cfg); err != nil {
		return nil, err
	}
	keys := cmp0(cfg.JournalKeys, DefaultJournalKeys)
	if keys < 1 || keys > maxJournalKeys {
		e.closeFallback()
		return nil, fmt.Errorf("%w: journal keys %d outside [1, %d]", shardlimit.ErrInvalidConfig, keys, maxJournalKeys)
	}
	e.journal = newJournal(e.cfg.Algorithm, e.rates, e.cfg.Buckets, keys)
	e.births = newBirths(len(e.rates), keys)
	denyKeys := cmp0(cfg.DenyCacheKeys, DefaultDenyCacheKeys)
	if denyKeys > maxDenyCacheKeys {
		e.closeFallback()
		return nil, fmt.Errorf("%w: deny cache keys %d above %d", shardlimit.ErrInvalidConfig, denyKeys, maxDenyCacheKeys)
	}
	e.deny = newDenyCache(denyKeys)
	e.start()
	return e, nil
}

// start joins the client's hub (see hub).
func (e *Exact) start() {
	e.drained = make(chan struct{})
	e.backoff.Store(int64(e.probeMin))
	e.probeDelay = e.probeMin
	e.join()
}

// StateKeys returns the Redis keys holding key's state, one per rate in
// the order of Config.Rates: <prefix>{<key>}:fw:<W>, :sc:<W>:<G> or
// :gcra:<W> by algorithm, W the rate's window and G its bucket in
// microseconds (the key hex-encoded after '#' if it has a brace). All of
// them carry key as their hash tag, so they share one Redis Cluster slot.
func (e *Exact) StateKeys(key string) []string {
	var keys [shardlimit.MaxRates]string
	e.stateKeys(&keys, key)
	return slices.Clone(keys[:len(e.rates)])
}

// stateKeys writes key's state keys (see StateKeys) to dst, one per rate,
// all of them in one string: one allocation.
func (e *Exact) stateKeys(dst *[shardlimit.MaxRates]string, key string) {
	var b strings.Builder
	n := len(e.rates) * taggedLen(e.prefix, key)
	for _, r := range e.rates {
		n += len(r.suffix)
	}
	b.Grow(n)
	var ends [shardlimit.MaxRates]int
	for i, r := range e.rates {
		writeTagged(&b, e.prefix, key)
		b.WriteString(r.suffix)
		ends[i] = b.Len()
	}
	all, start := b.String(), 0
	for i := range e.rates {
		dst[i], start = all[start:ends[i]], ends[i]
	}
}

// AllowNContext is AllowN bounded by ctx as well as by the configured
// Timeout. If ctx ends first, Result.Err is ctx's error and nothing is
// consumed locally (whether Redis consumed the units is unknown).
func (e *Exact) AllowNContext(ctx context.Context, key string, now time.Time, n int) shardlimit.Result {
	return e.decide(ctx, key, now, n, true)
}

// Peek reports what AllowN(key, now, n) would decide, consuming nothing (the
// script writes nothing).
func (e *Exact) Peek(key string, now time.Time, n int) shardlimit.Result {
	return e.decide(context.Background(), key, now, n, false)
}

// limitsFor returns key's own limits or the defaults.
func (e *Exact) limitsFor(key string) limitSet {
	e.mu.RLock()
	lims, ok := e.limits[key]
	e.mu.RUnlock()
	if !ok {
		lims = e.defaults.Load().lims
	}
	return lims
}

// decide is the body of every decision.
func (e *Exact) decide(ctx context.Context, key string, now time.Time, n int, consume bool) shardlimit.Result {
	switch {
	case e.closed.Load():
		return shardlimit.Result{Err: shardlimit.ErrClosed}
	case n < 0:
		return shardlimit.Result{Err: shardlimit.ErrInvalidCost}
	case len(key) == 0 || len(key) > e.cfg.MaxKeyBytes:
		return shardlimit.Result{Err: shardlimit.ErrInvalidKey}
	}
	at := e.instant(now)
	cached, hit, ticket := e.deny.lookup(key, at, n, e.rates) // before the limits (see denyCache)
	if hit && !e.bypass.Load() {
		e.deny.hits.Add(1)
		e.tally(consume, n, cached)
		return cached
	}
	lims := e.limitsFor(key)
	e.decisions.Add(1)
	if !e.hot.Load() {
		e.hub.activateExact(e)
	}
	gen := e.births.gen.Load() // before bypass: a loss proved since is seen by one of them (see storeLoss)
	if !e.bypass.Load() {
		start := time.Now()
		v, known := e.journal.view(key) // before the call leaves (see journalView)
		d, err := e.remote(ctx, key, now, n, &lims, consume)
		if errors.Is(err, shardlimit.ErrClosed) {
			return shardlimit.Result{Err: shardlimit.ErrClosed}
		}
		if err == nil {
			lost := int64(0)
			if known {
				lost = e.lossOf(&v, &d, n, &lims)
			}
			if d.epoch > v.epoch {
				e.journal.observe(key, d.epoch)
			}
			reborn := e.births.check(key, gen, &d, &lims, n, consume)
			crossed := e.births.crossed(gen)
			if lost == 0 && !reborn && !crossed {
				e.byStore(key, now, n, consume, &d)
				e.deny.remember(ticket, key, at, n, &d, e.rates)
				return d.res
			}
			// The store decided from state that lost units (this
			// process's, or any of a state it had seen), or the call
			// crossed a reply that proved a loss: the policy decides
			// instead. Units the store admitted stay in it, recorded as
			// granted (the strict side).
			if consume && d.res.Allowed && n > 0 {
				e.journal.recordGrant(key, d.at, n, d.epoch)
			}
			if lost > 0 || reborn {
				e.storeLoss(lost)
			}
		} else {
			if cerr := callerErr(ctx); cerr != nil {
				// The caller gave up; not a sign of Redis's health.
				return shardlimit.Result{Limit: lims[e.longest], Err: cerr}
			}
			e.failed(err, start)
		}
	}
	e.policyDecs.Add(1)
	r := e.byPolicy(key, now, n, &lims, consume)
	if consume && r.Allowed && n > 0 && r.Err == nil && !e.journal.record(key, at, n, true) {
		// The journal is full: units it cannot record would never reach
		// the store, so the policy denies this new key (see JournalKeys).
		r = e.failClosed(n, &lims)
	}
	e.tally(consume, n, r)
	return r
}

// byStore completes a decision d the store made for n units of key at
// now: it records the grant (in the journal, with the store's instant of
// it, and in the fallback).
func (e *Exact) byStore(key string, now time.Time, n int, consume bool, d *storeDecision) {
	if e.failing.Load() {
		e.endRun()
		e.verifyStore() // it may have restarted while calls failed
	}
	if consume && d.res.Allowed && n > 0 && e.journal.recordGrant(key, d.at, n, d.epoch) {
		e.journal.stamp(key, e.instant(now), d.at)
	}
	if consume && n > 0 && e.fallback != nil {
		e.shareFallback(key, now, n, d.res)
	}
	e.tally(consume, n, d.res)
}

// instant returns now in Unix microseconds, the journal's instant of a
// decision at now; with callerTime it also keeps the latest (the charge
// scripts' now).
func (e *Exact) instant(now time.Time) int64 {
	at := now.UnixMicro()
	if e.callerTime {
		at = max(0, at)
		for l := e.latest.Load(); at > l && !e.latest.CompareAndSwap(l, at); l = e.latest.Load() {
		}
	}
	return at
}

// tally counts a decision in Stats.
func (e *Exact) tally(consume bool, n int, r shardlimit.Result) {
	if !consume || n == 0 || r.Err != nil {
		return
	}
	if r.Allowed {
		e.allowed.Add(1)
	} else {
		e.denied.Add(1)
	}
}

// callerErr returns ctx's error, or context.DeadlineExceeded if ctx's
// deadline has passed but ctx has not noticed yet: with go-redis's
// ContextTimeoutEnabled the socket deadline, set to the same instant, may
// fail a read a moment before the context's own timer fires.
func callerErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// remote runs the algorithm's script for one decision: one call that
// decides every rate of key under the limits lims.
func (e *Exact) remote(ctx context.Context, key string, now time.Time, n int, lims *limitSet, consume bool) (storeDecision, error) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	sc := newDecisionCall(e, ctx)
	e.stateKeys(&sc.keys, key)
	sc.args[0], sc.args[1], sc.args[2] = min(n, shardlimit.MaxLimit+1), 0, redisTime
	if consume {
		sc.args[1] = 1
	}
	if e.callerTime {
		sc.args[2] = max(0, now.UnixMicro())
	}
	sc.nargs = 3
	d := e.defaults.Load()
	for i, r := range e.rates {
		if d.lims == *lims {
			sc.args[sc.nargs] = d.boxed[i] // boxed once, not per call
		} else {
			sc.args[sc.nargs] = lims[i]
		}
		sc.nargs += 1 + copy(sc.args[sc.nargs+1:], r.params)
	}
	if !e.begin() {
		sc.release()
		return storeDecision{}, shardlimit.ErrClosed
	}
	e.calls.Add(1)
	v, err := sc.run(ctx)
	if errors.Is(err, redis.Nil) {
		err = fmt.Errorf("%w: got nil, want an array", ErrBadReply)
	}
	if err != nil {
		return storeDecision{}, err
	}
	return decodeDecision(v, n, lims[:len(e.rates)], e.rates)
}
