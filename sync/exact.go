package sync

import (
	"context"
	"errors"
	"fmt"
	"net"
	stdsync "sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardlimit/shardlimit"
)

// FailurePolicy says how a limiter of this package decides while the
// shared store is unreachable, slow or answering errors.
type FailurePolicy int

const (
	// FallbackLocal (the default) decides in this process alone: limits
	// hold per process, so N processes admit up to N times the limit while
	// the store is down. Exact decides with its local fallback limiter (give
	// ExactConfig.Fallback a stricter limit, such as limit/N, to bound the
	// cluster's total).
	FallbackLocal FailurePolicy = iota
	// FailOpen admits every request whose cost could ever be admitted
	// (n <= limit); Remaining reports limit-n, as for a fresh key.
	FailOpen
	// FailClosed denies every request of positive cost, with RetryAfter the
	// current delay of the reconnect probe.
	FailClosed
)

// String returns "fallback_local", "fail_open" or "fail_closed".
func (p FailurePolicy) String() string {
	switch p {
	case FallbackLocal:
		return "fallback_local"
	case FailOpen:
		return "fail_open"
	case FailClosed:
		return "fail_closed"
	}
	return fmt.Sprintf("FailurePolicy(%d)", int(p))
}

// State is the health of a limiter's connection to the shared store.
type State int32

const (
	// Healthy: the store answers. For Exact, every decision is made by a
	// script in Redis.
	Healthy State = iota
	// Degraded: the store does not answer; the FailurePolicy decides. Exact
	// becomes Degraded when its calls keep failing with transport errors
	// (timeout, refused or broken connection): at least three in a row, the
	// first started ExactConfig.DegradeAfter or more before the last ended.
	// It stays so, without touching Redis, until its reconnect probe
	// succeeds.
	Degraded
)

// String returns "healthy" or "degraded".
func (s State) String() string {
	if s == Healthy {
		return "healthy"
	}
	return "degraded"
}

// StateChange is passed to the OnStateChange callback of a limiter's
// configuration.
type StateChange struct {
	// From and To are the states before and after the change.
	From, To State
	// Err is the error that made the limiter degraded (nil on recovery):
	// it wraps ErrUnavailable, ErrRejected, ErrBadReply or ErrEvicting and
	// the error that caused it.
	Err error
	// At is the local wall-clock time of the change.
	At time.Time
}

// Defaults of ExactConfig fields left zero.
const (
	// DefaultTimeout bounds one Redis call of Exact.
	DefaultTimeout = 50 * time.Millisecond
	// DefaultProbeInterval is the first delay of the reconnect probe.
	DefaultProbeInterval = 100 * time.Millisecond
	// DefaultMaxProbeInterval caps the reconnect probe's delay.
	DefaultMaxProbeInterval = 5 * time.Second
	// DefaultDegradeAfter is how long Exact's calls must keep failing
	// before it becomes Degraded.
	DefaultDegradeAfter = time.Second
)

// degradeCount is how many calls in a row must fail for Exact to become
// Degraded (and DegradeAfter pass): one slow or lost call is not an outage.
const degradeCount = 3

// ExactConfig configures an Exact limiter. Its embedded Config takes the
// fields of shardlimit.Config with their meaning and defaults, Rates
// included; Algorithm must be FixedWindow, SlidingCounter or GCRA (the
// sliding log has no exact mode), and every window (and for SlidingCounter
// every window/Buckets) must be a whole number of microseconds, the
// resolution of Redis TIME.
type ExactConfig struct {
	shardlimit.Config

	// Prefix starts every Redis key (see the package doc). Default
	// DefaultPrefix; may not contain a brace.
	Prefix string

	// Timeout bounds each Redis call, in [1ms, 1min]. Default 50ms. A call
	// that fails (times out, cannot connect, gets an error or a reply that
	// cannot be read) is decided by the Policy.
	Timeout time.Duration

	// DegradeAfter is how long calls must keep failing with transport
	// errors, with no call succeeding in between, before the limiter
	// becomes Degraded and stops calling Redis until its probe reaches it:
	// it degrades when at least three calls in a row failed and the first
	// of them started DegradeAfter or more before the last one ended. In
	// [1ns, 1min]; default 1s. A short value makes one stalled moment of a
	// loaded host an outage; a long one keeps every decision waiting up to
	// Timeout for longer when Redis is really gone.
	DegradeAfter time.Duration

	// Policy decides while Redis fails. Default FallbackLocal.
	Policy FailurePolicy

	// Fallback is the local limiter of FallbackLocal. If nil, one is built
	// from Config (and closed by Close); one given here stays the caller's
	// to close, and must have the same windows in the same order (one
	// rate's Window, or Rates), so that it enforces every rate and
	// SetLimits means the same to both; its limits and algorithm may
	// differ. While Redis is healthy every unit Redis admits is also
	// recorded in it, so a switch to the fallback continues from this
	// process's own usage of every rate instead of a fresh budget. Ignored
	// by the other policies.
	Fallback shardlimit.Limiter

	// ProbeInterval is the first delay of the reconnect probe, which pings
	// Redis while degraded and doubles its delay after each failure up to
	// MaxProbeInterval. In [1ms, 1h]; default 100ms.
	ProbeInterval time.Duration

	// MaxProbeInterval caps the probe's delay, in [ProbeInterval, 1h].
	// Default 5s (or ProbeInterval if that is larger).
	MaxProbeInterval time.Duration

	// EvictionCheck is how often the background goroutine reads Redis's
	// eviction state (INFO), in [1ms, 1h]; default 2s; negative: never.
	// While Redis's evicted_keys grows the limiter is Degraded, with an
	// error wrapping ErrEvicting, and decides by Policy as during an
	// outage (see the package doc on eviction).
	EvictionCheck time.Duration

	// OnStateChange, if set, is called on every change between Healthy and
	// Degraded, in order, from the limiter's background goroutine (never
	// from a deciding goroutine). It must not block for long and must not
	// call Close.
	OnStateChange func(StateChange)
}

// ExactStats are an Exact limiter's cumulative counters since construction.
type ExactStats struct {
	State           State  // state now
	Calls           uint64 // decision scripts sent to Redis
	Errors          uint64 // of which failed (any error, including timeouts)
	Timeouts        uint64 // of which timed out
	BadReplies      uint64 // of which the store's reply was unreadable (ErrBadReply)
	PolicyDecisions uint64 // decisions made by the FailurePolicy
	Trips           uint64 // changes Healthy -> Degraded
	Recoveries      uint64 // changes Degraded -> Healthy
	Probes          uint64 // reconnect probes sent
	ProbeFailures   uint64 // of which failed

	// LastError is the most recent failure of a call to Redis, nil if
	// there was none. It wraps ErrUnavailable, ErrRejected or ErrBadReply
	// and the error that caused it. Failures that do not degrade the
	// limiter (a reply that cannot be read, an error reply) are reported
	// here and in Errors and BadReplies: the call is decided by the
	// FailurePolicy.
	LastError error

	// Eviction is what the limiter knows of Redis's key eviction.
	Eviction Eviction
}

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
// least three in a row, the limiter becomes Degraded: every call is then
// decided by the policy without touching Redis, until a background probe
// (PING with exponential back-off) reaches Redis again. One slow call on a
// loaded host does not degrade it. While Healthy every unit Redis admits is
// also recorded in the local fallback, so switching to it continues from
// this process's usage, never from a fresh budget; units the fallback
// admits are not sent to Redis, so the window in which Redis returns may
// admit up to the limit on top of them. A timed-out call may still have
// consumed its units in Redis; the fallback does not know it. With a
// Cluster client the limiter is degraded as a whole while any master is
// unreachable, and a transport error also asks the client to reload its
// slot map. Errors that Redis answers (a key holding foreign data, a script
// denied by an ACL, OOM) and unreadable replies are decided by the policy
// too, but do not degrade the limiter: they are counted in ExactStats
// (Errors, BadReplies) and the last one is kept, with its cause, in
// ExactStats.LastError.
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
// All methods are safe for concurrent use. Unlike the in-process limiters,
// every decision allocates (the key and arguments sent to Redis, a goroutine
// that bounds the call). Close and Shutdown stop the probe goroutine and
// return within their deadline whatever Redis does.
type Exact struct {
	client   RedisClient
	cfg      shardlimit.Config // defaults filled in; the limits are the defaults' initial values
	rates    []exactRate       // in the order of Config.Rates (one if Rates is empty)
	longest  int               // index in rates of the longest window
	defaults atomic.Pointer[limitSet]
	prefix   string
	script   *redis.Script // the algorithm's script
	timeout  time.Duration
	degrade  time.Duration // DegradeAfter
	policy   FailurePolicy
	fallback shardlimit.Limiter
	ownFb    bool // fallback built here: Close closes it
	probeMin time.Duration
	probeMax time.Duration
	onChange func(StateChange)
	watch    *evictionWatch

	// callerTime makes the scripts decide at AllowN's now instead of Redis
	// TIME. Tests set it to replay exact instants; it is not exported.
	callerTime bool

	mu     stdsync.RWMutex
	limits map[string]limitSet // own limits (SetLimits)

	state atomic.Int32
	trip  chan error // to the background goroutine; capacity 1

	backoff atomic.Int64

	// The run of failed calls (transport errors) since the last call that
	// reached Redis: failing is read by every call that succeeds.
	failing  atomic.Bool
	runMu    stdsync.Mutex
	runStart time.Time // start of the run's first call; under runMu
	runCalls int       // calls in the run; under runMu

	allowed, denied                   atomic.Uint64
	calls, errs, timeouts, policyDecs atomic.Uint64
	badReplies                        atomic.Uint64
	lastErr                           lastError
	trips, recoveries                 atomic.Uint64
	probes, probeFails                atomic.Uint64

	// gate orders calls against Close: a call registers in inflight under
	// gate's read lock only while the limiter is open, and Close sets
	// closed under the write lock before it waits for inflight to reach 0
	// (drained is closed then).
	gate      stdsync.RWMutex
	inflight  atomic.Int64
	drained   chan struct{}
	drainOnce stdsync.Once

	closed     atomic.Bool
	closeOnce  stdsync.Once
	closeErr   error
	loopCtx    context.Context // parent of the background goroutine's calls
	loopCancel context.CancelFunc
	stop       chan struct{}
	done       chan struct{}
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

// ratesOf returns cfg's rates: Rates, or the one of Limit and Window.
func ratesOf(cfg shardlimit.Config) []shardlimit.Rate {
	if len(cfg.Rates) > 0 {
		return cfg.Rates
	}
	return []shardlimit.Rate{{Limit: cfg.Limit, Window: cfg.Window}}
}

// NewExact returns an Exact limiter deciding through client. It does no I/O,
// so it returns at once whether or not Redis is reachable; the first call
// finds out. It starts one background goroutine (the reconnect probe); call
// Close to stop it.
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
	e := &Exact{client: client, limits: make(map[string]limitSet)}
	switch cfg.Algorithm {
	case shardlimit.FixedWindow:
		e.script = fixedScript
	case shardlimit.SlidingCounter:
		e.script = counterScript
	case shardlimit.GCRA:
		e.script = gcraScript
	case shardlimit.SlidingLog:
		return nil, fmt.Errorf("%w: the sliding log has no exact mode; use SlidingCounter", shardlimit.ErrInvalidConfig)
	default:
		return nil, fmt.Errorf("%w: unknown algorithm %d", shardlimit.ErrInvalidConfig, int(cfg.Algorithm))
	}
	if err := e.configure(&cfg); err != nil {
		return nil, err
	}
	// Validate the limiter fields and fill their defaults by building a
	// limiter: the fallback, or a throwaway one without a janitor.
	var full shardlimit.Config
	switch {
	case cfg.Policy == FallbackLocal && cfg.Fallback == nil:
		fb, err := shardlimit.New(cfg.Config)
		if err != nil {
			return nil, err
		}
		e.fallback, e.ownFb, full = fb, true, fb.Config()
	default:
		probe := cfg.Config
		probe.JanitorInterval = -1
		tmp, err := shardlimit.New(probe)
		if err != nil {
			return nil, err
		}
		full = tmp.Config()
		full.JanitorInterval = cfg.JanitorInterval
		_ = tmp.Close()
		if cfg.Policy == FallbackLocal {
			e.fallback = cfg.Fallback
		}
	}
	e.cfg = full
	if err := e.setRates(); err != nil {
		e.closeFallback()
		return nil, err
	}
	if cfg.Policy == FallbackLocal && cfg.Fallback != nil {
		if err := e.checkFallback(cfg.Fallback.Config()); err != nil {
			return nil, err
		}
	}
	e.trip = make(chan error, 1)
	e.stop = make(chan struct{})
	e.done = make(chan struct{})
	e.drained = make(chan struct{})
	e.loopCtx, e.loopCancel = context.WithCancel(context.Background())
	e.backoff.Store(int64(e.probeMin))
	go e.run()
	return e, nil
}

// setRates sets up e.rates and the default limits from e.cfg, whose
// limiter fields are valid: every window (and bucket) must be a whole
// number of microseconds, the resolution of Redis TIME.
func (e *Exact) setRates() error {
	const us = int64(time.Microsecond)
	var defaults limitSet
	for i, r := range ratesOf(e.cfg) {
		w := int64(r.Window)
		if w%us != 0 {
			return fmt.Errorf("%w: window %v is not a whole number of microseconds", shardlimit.ErrInvalidConfig, r.Window)
		}
		x := exactRate{window: r.Window}
		switch e.cfg.Algorithm {
		case shardlimit.FixedWindow:
			x.suffix = fmt.Sprintf(":fw:%d", w/us)
			x.params = []any{w / us}
		case shardlimit.SlidingCounter:
			g := w / int64(e.cfg.Buckets)
			if g%us != 0 {
				return fmt.Errorf("%w: bucket %v (window/buckets) is not a whole number of microseconds", shardlimit.ErrInvalidConfig, time.Duration(g))
			}
			x.suffix = fmt.Sprintf(":sc:%d:%d", w/us, g/us)
			x.params = []any{g / us, e.cfg.Buckets}
		case shardlimit.GCRA:
			x.suffix = fmt.Sprintf(":gcra:%d", w/us)
			x.params = []any{w / us}
		}
		e.rates = append(e.rates, x)
		defaults[i] = r.Limit
		if r.Window > e.rates[e.longest].window {
			e.longest = i
		}
	}
	e.defaults.Store(&defaults)
	return nil
}

// checkFallback reports an error unless the fallback limiter configured as
// fb has the windows of e's rates in the same order, so that SetLimits
// means the same to both and the fallback enforces every rate.
func (e *Exact) checkFallback(fb shardlimit.Config) error {
	rs := ratesOf(fb)
	ok := len(rs) == len(e.rates)
	for i := 0; ok && i < len(rs); i++ {
		ok = rs[i].Window == e.rates[i].window
	}
	if !ok {
		return fmt.Errorf("%w: the fallback's windows %v are not the limiter's %v", shardlimit.ErrInvalidConfig, windowsOf(rs), windowsOf(ratesOf(e.cfg)))
	}
	return nil
}

// windowsOf returns the windows of rs.
func windowsOf(rs []shardlimit.Rate) []time.Duration {
	w := make([]time.Duration, len(rs))
	for i, r := range rs {
		w[i] = r.Window
	}
	return w
}

// configure validates and applies the fields of cfg outside its Config.
func (e *Exact) configure(cfg *ExactConfig) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{shardlimit.ErrInvalidConfig}, args...)...)
	}
	e.prefix = cfg.Prefix
	if e.prefix == "" {
		e.prefix = DefaultPrefix
	}
	if err := checkPrefix(e.prefix); err != nil {
		return err
	}
	e.timeout = cfg.Timeout
	if e.timeout == 0 {
		e.timeout = DefaultTimeout
	}
	if e.timeout < time.Millisecond || e.timeout > time.Minute {
		return bad("timeout %v outside [1ms, 1m]", e.timeout)
	}
	e.degrade = cmp0(cfg.DegradeAfter, DefaultDegradeAfter)
	if e.degrade < 0 || e.degrade > time.Minute {
		return bad("degrade after %v outside [1ns, 1m]", e.degrade)
	}
	if cfg.Policy < FallbackLocal || cfg.Policy > FailClosed {
		return bad("unknown failure policy %d", int(cfg.Policy))
	}
	e.policy = cfg.Policy
	e.probeMin = cfg.ProbeInterval
	if e.probeMin == 0 {
		e.probeMin = DefaultProbeInterval
	}
	if e.probeMin < time.Millisecond || e.probeMin > time.Hour {
		return bad("probe interval %v outside [1ms, 1h]", e.probeMin)
	}
	e.probeMax = cfg.MaxProbeInterval
	if e.probeMax == 0 {
		e.probeMax = max(DefaultMaxProbeInterval, e.probeMin)
	}
	if e.probeMax < e.probeMin || e.probeMax > time.Hour {
		return bad("max probe interval %v outside [%v, 1h]", e.probeMax, e.probeMin)
	}
	e.onChange = cfg.OnStateChange
	every := cmp0(cfg.EvictionCheck, DefaultEvictionCheck)
	if every > time.Hour || every >= 0 && every < time.Millisecond {
		return bad("eviction check %v outside [1ms, 1h]", every)
	}
	var why error
	if !canReadEviction(e.client) {
		why = errNoInfo
	}
	e.watch = newEvictionWatch(every, why)
	return nil
}

func (e *Exact) closeFallback() {
	if e.ownFb && e.fallback != nil {
		_ = e.fallback.Close()
	}
}

// StateKeys returns the Redis keys holding key's state, one per rate in
// the order of Config.Rates: <prefix>{<key>}:fw:<W>, :sc:<W>:<G> or
// :gcra:<W> by algorithm, W the rate's window and G its bucket in
// microseconds (the key hex-encoded after '#' if it has a brace). All of
// them carry key as their hash tag, so they share one Redis Cluster slot.
func (e *Exact) StateKeys(key string) []string {
	tag := tagged(e.prefix, key)
	keys := make([]string, len(e.rates))
	for i, r := range e.rates {
		keys[i] = tag + r.suffix
	}
	return keys
}

// Allow reports whether one request for key may happen now. It is
// AllowN(key, Config.Clock.Now(), 1).Allowed.
func (e *Exact) Allow(key string) bool {
	return e.decide(context.Background(), key, e.cfg.Clock.Now(), 1, true).Allowed
}

// AllowN decides whether n units for key may happen, consuming them if so,
// by one script call in Redis at the Redis server's time; now is used only
// by the local fallback. n = 0 is a peek. n < 0 returns ErrInvalidCost, an
// empty key or one longer than Config.MaxKeyBytes ErrInvalidKey, a closed
// limiter ErrClosed (in Result.Err). Redis failures never appear in
// Result.Err: the FailurePolicy decides instead.
func (e *Exact) AllowN(key string, now time.Time, n int) shardlimit.Result {
	return e.decide(context.Background(), key, now, n, true)
}

// AllowNContext is AllowN bounded by ctx as well as by the configured
// Timeout. If ctx ends first, Result.Err is ctx's error and nothing is
// consumed locally (whether Redis consumed the units is unknown).
func (e *Exact) AllowNContext(ctx context.Context, key string, now time.Time, n int) shardlimit.Result {
	return e.decide(ctx, key, now, n, true)
}

// AllowNow is AllowN at the configured Clock (used only by the local
// fallback).
func (e *Exact) AllowNow(key string, n int) shardlimit.Result {
	return e.decide(context.Background(), key, e.cfg.Clock.Now(), n, true)
}

// AllowBytesNow is AllowNow for a []byte key. It allocates the key's
// string and never retains key.
func (e *Exact) AllowBytesNow(key []byte, n int) shardlimit.Result {
	return e.AllowNow(string(key), n)
}

// AllowBytes is Allow for a []byte key. It allocates the key's string.
func (e *Exact) AllowBytes(key []byte) bool {
	return e.Allow(string(key))
}

// AllowAt is AllowN(key, now, 1).Allowed: decided in Redis at the Redis
// server's time, now used only by the local fallback.
func (e *Exact) AllowAt(key string, now time.Time) bool {
	return e.AllowN(key, now, 1).Allowed
}

// AllowBytesAt is AllowAt for a []byte key. It allocates the key's string
// and never retains key.
func (e *Exact) AllowBytesAt(key []byte, now time.Time) bool {
	return e.AllowN(string(key), now, 1).Allowed
}

// AllowBytesN is AllowN for a []byte key. It allocates the key's string
// and never retains key.
func (e *Exact) AllowBytesN(key []byte, now time.Time, n int) shardlimit.Result {
	return e.AllowN(string(key), now, n)
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
		lims = *e.defaults.Load()
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
	lims := e.limitsFor(key)
	if State(e.state.Load()) == Healthy {
		start := time.Now()
		r, err := e.remote(ctx, key, now, n, &lims, consume)
		if errors.Is(err, shardlimit.ErrClosed) {
			return shardlimit.Result{Err: shardlimit.ErrClosed}
		}
		if err == nil {
			if e.failing.Load() {
				e.endRun()
			}
			if consume && r.Allowed && n > 0 && e.fallback != nil {
				e.fallback.AllowN(key, now, n) // record this process's usage
			}
			e.tally(consume, n, r)
			return r
		}
		if cerr := callerErr(ctx); cerr != nil {
			// The caller gave up; not a sign of Redis's health.
			return shardlimit.Result{Limit: lims[e.longest], Err: cerr}
		}
		e.failed(err, start)
	}
	e.policyDecs.Add(1)
	r := e.byPolicy(key, now, n, &lims, consume)
	e.tally(consume, n, r)
	return r
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
func (e *Exact) remote(ctx context.Context, key string, now time.Time, n int, lims *limitSet, consume bool) (shardlimit.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	at := int64(-1) // Redis TIME
	if e.callerTime {
		at = max(0, now.UnixMicro())
	}
	c := 0
	if consume {
		c = 1
	}
	keys := e.StateKeys(key)
	args := make([]any, 3, 3+3*len(e.rates))
	args[0], args[1], args[2] = min(n, shardlimit.MaxLimit+1), c, at
	for i, r := range e.rates {
		args = append(args, lims[i])
		args = append(args, r.params...)
	}
	if !e.begin() {
		return shardlimit.Result{}, shardlimit.ErrClosed
	}
	e.calls.Add(1)
	v, err := call(ctx, func() (any, error) {
		return e.script.Run(ctx, e.client, keys, args...).Result()
	}, e.end)
	if errors.Is(err, redis.Nil) {
		err = fmt.Errorf("%w: got nil, want an array", ErrBadReply)
	}
	if err != nil {
		return shardlimit.Result{}, err
	}
	return decodeDecision(v, n, lims[:len(e.rates)], e.rates)
}

// begin registers a Redis call in flight, or returns false if the limiter
// is closed.
func (e *Exact) begin() bool {
	e.gate.RLock()
	defer e.gate.RUnlock()
	if e.closed.Load() {
		return false
	}
	e.inflight.Add(1)
	return true
}

// end unregisters a Redis call that has returned.
func (e *Exact) end() {
	if e.inflight.Add(-1) == 0 && e.closed.Load() {
		e.drainOnce.Do(func() { close(e.drained) })
	}
}

// decodeDecision checks the reply of a decision script for cost n under
// limits lims, one per rate of rates: {allowed, then per rate: remaining,
// reset_us, retry_us}, every number in range and consistent with n and the
// rate's limit. It converts the reply to a Result (see bind).
func decodeDecision(v any, n int, lims []int, rates []exactRate) (shardlimit.Result, error) {
	want := 1 + 3*len(rates)
	arr, ok := v.([]any)
	if !ok || len(arr) != want {
		return shardlimit.Result{}, fmt.Errorf("%w: got %T %v, want an array of %d integers", ErrBadReply, v, v, want)
	}
	var x [1 + 3*shardlimit.MaxRates]int64
	for i, el := range arr {
		if x[i], ok = el.(int64); !ok {
			return shardlimit.Result{}, fmt.Errorf("%w: element %d is %T, want an integer", ErrBadReply, i, el)
		}
	}
	allowed := x[0]
	if allowed != 0 && allowed != 1 || n == 0 && allowed == 0 {
		return shardlimit.Result{}, fmt.Errorf("%w: inconsistent decision %v", ErrBadReply, arr)
	}
	const maxUs = int64(1<<63-1) / int64(time.Microsecond)
	var out [shardlimit.MaxRates]rateOutcome
	for k, rt := range rates {
		rem, reset, retry := x[1+3*k], x[2+3*k], x[3+3*k]
		lim := lims[k]
		switch {
		case rem < 0 || rem > int64(lim),
			reset < 0 || reset > maxUs,
			retry < -1 || retry > maxUs,
			allowed == 1 && retry != 0,
			n > 0 && (retry == -1) != (n > lim):
			return shardlimit.Result{}, fmt.Errorf("%w: inconsistent decision %v (rate %d, limit %d, cost %d)", ErrBadReply, arr, k, lim, n)
		}
		o := rateOutcome{limit: lim, window: rt.window, remaining: int(rem), reset: time.Duration(reset) * time.Microsecond}
		if retry == -1 {
			o.retry = shardlimit.Never
		} else {
			o.retry = time.Duration(retry) * time.Microsecond
		}
		out[k] = o
	}
	return bind(allowed == 1, out[:len(rates)]), nil
}

// rateOutcome is one rate's side of a decision.
type rateOutcome struct {
	limit     int
	window    time.Duration
	remaining int           // after the decision, in [0, limit]
	reset     time.Duration // until the rate's usage next drops
	retry     time.Duration // until the rate admits the request: 0 if it does, Never if no wait can
}

// bind returns the Result of a decision, admitted or not, from each
// rate's outcome, as the in-process limiters report one: Limit, Remaining,
// ResetAfter and Window of the binding rate, the one with the least
// remaining (ties: the longest window); if denied, RetryAfter the latest
// of the rates' waits (each rate's usage only drops while none is
// admitted, so that is the first instant at which all admit; Never if any
// never does), at least a microsecond.
func bind(allowed bool, rs []rateOutcome) shardlimit.Result {
	b := 0
	var retry time.Duration
	for i, o := range rs {
		retry = max(retry, o.retry)
		if o.remaining < rs[b].remaining || o.remaining == rs[b].remaining && o.window > rs[b].window {
			b = i
		}
	}
	r := shardlimit.Result{
		Allowed:    allowed,
		Limit:      rs[b].limit,
		Remaining:  rs[b].remaining,
		ResetAfter: rs[b].reset,
		Window:     rs[b].window,
	}
	if !allowed {
		r.RetryAfter = max(retry, time.Microsecond)
	}
	return r
}

// failed counts a call started at start that failed with err, and
// degrades the limiter when transport errors have lasted (see DegradeAfter).
func (e *Exact) failed(err error, start time.Time) {
	e.errs.Add(1)
	if isTimeout(err) {
		e.timeouts.Add(1)
	}
	if errors.Is(err, ErrBadReply) {
		e.badReplies.Add(1)
	}
	transport := transportError(err)
	err = storeError(err)
	e.lastErr.set(err)
	if !transport {
		e.endRun() // Redis answered: it is reachable
		return
	}
	if !e.sustained(start) {
		return
	}
	if r, ok := e.client.(topologyReloader); ok {
		r.ReloadState(context.Background()) // a failed-over Cluster master
	}
	if e.state.CompareAndSwap(int32(Healthy), int32(Degraded)) {
		e.trips.Add(1)
		select {
		case e.trip <- err:
		default:
		}
	}
}

// sustained adds a call started at start to the run of failed calls and
// reports whether the run is long enough to degrade the limiter.
func (e *Exact) sustained(start time.Time) bool {
	e.runMu.Lock()
	defer e.runMu.Unlock()
	if e.runCalls == 0 || start.Before(e.runStart) {
		e.runStart = start
	}
	e.runCalls++
	e.failing.Store(true)
	return e.runCalls >= degradeCount && time.Since(e.runStart) >= e.degrade
}

// endRun ends the run of failed calls: a call reached Redis.
func (e *Exact) endRun() {
	e.runMu.Lock()
	e.runCalls = 0
	e.failing.Store(false)
	e.runMu.Unlock()
}

// isTimeout reports whether err is a timeout.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// byPolicy decides without Redis, under the limits lims.
func (e *Exact) byPolicy(key string, now time.Time, n int, lims *limitSet, consume bool) shardlimit.Result {
	if e.policy == FallbackLocal {
		if consume {
			return e.fallback.AllowN(key, now, n)
		}
		return e.fallback.Peek(key, now, n)
	}
	var out [shardlimit.MaxRates]rateOutcome
	allowed := true
	for k, rt := range e.rates {
		lim := lims[k]
		o := rateOutcome{limit: lim, window: rt.window}
		if n > lim {
			o.retry, allowed = shardlimit.Never, false
		}
		out[k] = o
	}
	rs := out[:len(e.rates)]
	if e.policy == FailOpen {
		// Every rate as a fresh key's.
		for k := range rs {
			rs[k].remaining = rs[k].limit
			if allowed {
				rs[k].remaining -= n
			}
		}
		return bind(allowed, rs)
	}
	// FailClosed: no room anywhere, the probe's delay as the wait.
	if n == 0 {
		return bind(true, rs)
	}
	wait := time.Duration(e.backoff.Load())
	for k := range rs {
		if rs[k].retry == 0 {
			rs[k].retry, rs[k].reset = wait, wait
		}
	}
	return bind(false, rs)
}

// run is the background goroutine: it reports state changes and probes
// Redis while degraded, until Close.
func (e *Exact) run() {
	defer close(e.done)
	// Eviction checks while Healthy; the first at once (the policy).
	timer := time.NewTimer(0)
	defer timer.Stop()
	check := timer.C
	if !e.watch.on() {
		check = nil
	}
	for {
		select {
		case <-e.stop:
			return
		case err := <-e.trip:
			e.notify(StateChange{From: Healthy, To: Degraded, Err: err, At: time.Now()})
		case <-check:
			err := e.checkEviction()
			if !e.watch.on() { // Redis refused INFO: never asked again
				check = nil
			}
			timer.Reset(e.watch.wait(time.Now()))
			if err == nil || !e.state.CompareAndSwap(int32(Healthy), int32(Degraded)) {
				continue
			}
			e.trips.Add(1)
			e.notify(StateChange{From: Healthy, To: Degraded, Err: err, At: time.Now()})
		}
		if !e.probe() {
			return
		}
		e.notify(StateChange{From: Degraded, To: Healthy, At: time.Now()})
		timer.Reset(e.watch.wait(time.Now()))
	}
}

// checkEviction reads Redis's eviction state and returns an error wrapping
// ErrEvicting if it evicted keys since the previous check.
func (e *Exact) checkEviction() error {
	if !e.begin() {
		return nil
	}
	ctx, cancel := context.WithTimeout(e.loopCtx, e.timeout)
	defer cancel()
	return e.watch.check(ctx, func(ctx context.Context) (evictionInfo, error) {
		v, err := call(ctx, func() (any, error) {
			in, err := readEviction(ctx, e.client)
			return in, err
		}, e.end)
		in, ok := v.(evictionInfo)
		if err != nil || !ok {
			return evictionInfo{}, err
		}
		return in, nil
	})
}

// probe pings Redis with exponential back-off until it answers and, if
// the limiter is degraded by eviction, a check finds that Redis evicted no
// key since the previous one (true), or until the limiter is closed
// (false).
func (e *Exact) probe() bool {
	d := e.probeMin
	for {
		e.backoff.Store(int64(d))
		if !e.sleep(d) || !e.begin() {
			return false
		}
		e.probes.Add(1)
		ctx, cancel := context.WithTimeout(e.loopCtx, e.timeout)
		_, err := call(ctx, func() (any, error) { return e.client.Ping(ctx).Result() }, e.end)
		cancel()
		if err != nil {
			e.probeFails.Add(1)
			e.lastErr.set(storeError(err))
			d = min(2*d, e.probeMax)
			continue
		}
		if e.watch.evicting() {
			// Still evicting until a check a full interval after the
			// last one finds no eviction.
			if !e.sleep(e.watch.wait(time.Now())) {
				return false
			}
			if e.checkEviction() != nil {
				d = e.probeMin
				continue
			}
		}
		e.backoff.Store(int64(e.probeMin))
		e.endRun()
		e.state.Store(int32(Healthy))
		e.recoveries.Add(1)
		return true
	}
}

// sleep waits d and returns true, or false as soon as the limiter is
// closed.
func (e *Exact) sleep(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-e.stop:
		return false
	case <-t.C:
		return true
	}
}

func (e *Exact) notify(c StateChange) {
	if e.onChange != nil {
		e.onChange(c)
	}
}

// checkKey validates a key for the configuration methods.
func (e *Exact) checkKey(key string) error {
	switch {
	case e.closed.Load():
		return shardlimit.ErrClosed
	case len(key) == 0:
		return fmt.Errorf("%w: empty key", shardlimit.ErrInvalidKey)
	case len(key) > e.cfg.MaxKeyBytes:
		return fmt.Errorf("%w: key of %d bytes is longer than %d", shardlimit.ErrInvalidKey, len(key), e.cfg.MaxKeyBytes)
	}
	return nil
}

// checkLimits validates limits, one per rate in the order of Config.Rates.
func (e *Exact) checkLimits(limits []int) (limitSet, error) {
	var ls limitSet
	if len(limits) != len(e.rates) {
		return ls, fmt.Errorf("%w: %d limits for %d rates", shardlimit.ErrInvalidConfig, len(limits), len(e.rates))
	}
	for i, limit := range limits {
		if limit < 0 || limit > shardlimit.MaxLimit {
			return ls, fmt.Errorf("%w: limit %d outside [0, %d]", shardlimit.ErrInvalidConfig, limit, shardlimit.MaxLimit)
		}
		ls[i] = limit
	}
	return ls, nil
}

// SetLimit gives key a limit of its own in [0, MaxLimit] (0 blocks the
// key). It is SetLimits(key, limit), so a limiter of several rates
// refuses it with an error wrapping ErrInvalidConfig.
func (e *Exact) SetLimit(key string, limit int) error {
	return e.SetLimits(key, limit)
}

// SetLimits gives key limits of its own, one per rate in the order of
// Config.Rates, each in [0, MaxLimit] (0 blocks the key), kept in this
// process until ClearLimit, sent with every decision and passed to the
// fallback: configure them on every process. Usage already counted in
// Redis counts against the new limits. It returns an error wrapping
// ErrInvalidConfig if the count of limits is not the count of rates or a
// limit is out of range, ErrInvalidKey for an empty or too long key,
// ErrClosed after Close, or the fallback's error.
func (e *Exact) SetLimits(key string, limits ...int) error {
	ls, err := e.checkLimits(limits)
	if err != nil {
		return err
	}
	if err := e.checkKey(key); err != nil {
		return err
	}
	e.mu.Lock()
	e.limits[key] = ls
	e.mu.Unlock()
	if e.fallback != nil {
		return e.fallback.SetLimits(key, limits...)
	}
	return nil
}

// ClearLimit makes key use the default limits again, here and in the
// fallback.
func (e *Exact) ClearLimit(key string) error {
	if err := e.checkKey(key); err != nil {
		return err
	}
	e.mu.Lock()
	delete(e.limits, key)
	e.mu.Unlock()
	if e.fallback != nil {
		return e.fallback.ClearLimit(key)
	}
	return nil
}

// SetDefaultLimit changes the limit of every key without its own. It is
// SetDefaultLimits(limit), so a limiter of several rates refuses it with
// an error wrapping ErrInvalidConfig.
func (e *Exact) SetDefaultLimit(limit int) error {
	return e.SetDefaultLimits(limit)
}

// SetDefaultLimits changes the limits of every key without its own, one
// per rate in the order of Config.Rates, each in [0, MaxLimit], here and
// in the fallback. Errors as SetLimits.
func (e *Exact) SetDefaultLimits(limits ...int) error {
	ls, err := e.checkLimits(limits)
	if err != nil {
		return err
	}
	if e.closed.Load() {
		return shardlimit.ErrClosed
	}
	e.defaults.Store(&ls)
	if e.fallback != nil {
		return e.fallback.SetDefaultLimits(limits...)
	}
	return nil
}

// Reset forgets key's usage, in Redis (for every process) and in the
// fallback; not its own limit. It returns an error wrapping ErrUnavailable
// if Redis could not be reached within the Timeout.
func (e *Exact) Reset(key string) error {
	if err := e.checkKey(key); err != nil {
		return err
	}
	if e.fallback != nil {
		if err := e.fallback.Reset(key); err != nil {
			return err
		}
	}
	if !e.begin() {
		return shardlimit.ErrClosed
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	keys := e.StateKeys(key)
	if _, err := call(ctx, func() (any, error) { return e.client.Del(ctx, keys...).Result() }, e.end); err != nil {
		return fmt.Errorf("%w: reset %q: %w", ErrUnavailable, key, err)
	}
	return nil
}

// Len returns the number of keys the local fallback holds (0 without one).
// Keys in Redis are not counted: that would need a SCAN; they expire by
// their TTL.
func (e *Exact) Len() int {
	if e.fallback == nil {
		return 0
	}
	return e.fallback.Len()
}

// Stats returns the counts of decisions of positive cost this limiter made
// (by Redis or by the policy); Keys, Evicted and Refused are the fallback's.
func (e *Exact) Stats() shardlimit.Stats {
	st := shardlimit.Stats{Allowed: e.allowed.Load(), Denied: e.denied.Load()}
	if e.fallback != nil {
		fs := e.fallback.Stats()
		st.Keys, st.Evicted, st.Refused = fs.Keys, fs.Evicted, fs.Refused
	}
	return st
}

// ExactStats returns the counters of the Redis path and the failure
// policy.
func (e *Exact) ExactStats() ExactStats {
	return ExactStats{
		State:           State(e.state.Load()),
		Calls:           e.calls.Load(),
		Errors:          e.errs.Load(),
		Timeouts:        e.timeouts.Load(),
		BadReplies:      e.badReplies.Load(),
		PolicyDecisions: e.policyDecs.Load(),
		Trips:           e.trips.Load(),
		Recoveries:      e.recoveries.Load(),
		Probes:          e.probes.Load(),
		ProbeFailures:   e.probeFails.Load(),
		LastError:       e.lastErr.get(),
		Eviction:        e.watch.stats(),
	}
}

// State returns the current state.
func (e *Exact) State() State {
	return State(e.state.Load())
}

// Sweep evicts idle keys of the local fallback and returns how many; Redis
// keys expire by their TTL. 0 without a fallback.
func (e *Exact) Sweep(now time.Time) int {
	if e.fallback == nil || e.closed.Load() {
		return 0
	}
	return e.fallback.Sweep(now)
}

// Config returns the limiter configuration in effect, defaults filled in
// and the default limits as they are now.
func (e *Exact) Config() shardlimit.Config {
	cfg := e.cfg
	d := e.defaults.Load()
	if len(cfg.Rates) == 0 {
		cfg.Limit = d[0]
		return cfg
	}
	cfg.Rates = make([]shardlimit.Rate, len(e.rates))
	for i, r := range e.rates {
		cfg.Rates[i] = shardlimit.Rate{Limit: d[i], Window: r.window}
	}
	return cfg
}

// Close is Shutdown with a deadline of one Timeout from now: every call in
// flight was started with that bound, so with a client that ends its
// socket calls at their context's deadline (ContextTimeoutEnabled) none is
// left by then.
func (e *Exact) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	return e.Shutdown(ctx)
}

// Shutdown stops the background goroutine (ending a probe it has in
// flight), waits until no Redis call is in flight or ctx is done, and
// closes the fallback if NewExact built it. It returns within ctx's
// deadline whatever Redis does. A call abandoned at its Timeout stays in
// flight until the client ends it: at once with ContextTimeoutEnabled, else
// by its ReadTimeout, never with a ReadTimeout of -1 (see the package doc);
// if some are left when ctx is done, Shutdown returns an error wrapping
// ErrUnavailable and ctx's error (such a call only waits for its reply:
// nothing new is sent unless the client re-sends it, see MaxRetries in the
// package doc). Shutdown sends nothing to Redis and is idempotent: later
// calls, and Close, return the first one's result. Afterwards decisions
// return ErrClosed. The Redis client stays the caller's.
func (e *Exact) Shutdown(ctx context.Context) error {
	e.closeOnce.Do(func() {
		e.gate.Lock()
		e.closed.Store(true)
		e.gate.Unlock()
		if e.inflight.Load() == 0 {
			e.drainOnce.Do(func() { close(e.drained) })
		}
		close(e.stop)
		e.loopCancel()
		<-e.done // its calls end with loopCtx
		select {
		case <-e.drained:
		case <-ctx.Done():
			e.closeErr = fmt.Errorf("%w: %d calls still in flight at shutdown: %w", ErrUnavailable, e.inflight.Load(), ctx.Err())
		}
		e.closeFallback()
	})
	return e.closeErr
}
