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
	// becomes Degraded when a call fails with a transport error (timeout,
	// refused or broken connection) and stays so, without touching Redis,
	// until its reconnect probe succeeds.
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
	// Err is the error that made the limiter degraded (nil on recovery).
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
)

// ExactConfig configures an Exact limiter. Its embedded Config takes the
// fields of shardlimit.Config with their meaning and defaults; Algorithm
// must be FixedWindow, SlidingCounter or GCRA (the sliding log has no exact
// mode), and Window (and for SlidingCounter Window/Buckets) must be a whole
// number of microseconds, the resolution of Redis TIME.
type ExactConfig struct {
	shardlimit.Config

	// Prefix starts every Redis key (see the package doc). Default
	// DefaultPrefix; may not contain a brace.
	Prefix string

	// Timeout bounds each Redis call, in [1ms, 1min]. Default 50ms.
	Timeout time.Duration

	// Policy decides while Redis fails. Default FallbackLocal.
	Policy FailurePolicy

	// Fallback is the local limiter of FallbackLocal. If nil, one is built
	// from Config (and closed by Close); one given here stays the caller's
	// to close. While Redis is healthy every unit Redis admits is also
	// recorded in it, so a switch to the fallback continues from this
	// process's own usage instead of a fresh budget. Ignored by the other
	// policies.
	Fallback shardlimit.Limiter

	// ProbeInterval is the first delay of the reconnect probe, which pings
	// Redis while degraded and doubles its delay after each failure up to
	// MaxProbeInterval. In [1ms, 1h]; default 100ms.
	ProbeInterval time.Duration

	// MaxProbeInterval caps the probe's delay, in [ProbeInterval, 1h].
	// Default 5s (or ProbeInterval if that is larger).
	MaxProbeInterval time.Duration

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
	PolicyDecisions uint64 // decisions made by the FailurePolicy
	Trips           uint64 // changes Healthy -> Degraded
	Recoveries      uint64 // changes Degraded -> Healthy
	Probes          uint64 // reconnect probes sent
	ProbeFailures   uint64 // of which failed
}

// Exact is a shardlimit.Limiter that decides every request with one Lua
// script in Redis, so every process sharing the Redis shares one exact limit
// per key: the fixed window counter, the sliding window counter (policy S2,
// integer arithmetic) or GCRA, as Config.Algorithm says, with the same
// Result semantics as the in-process limiters.
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
// the client's options (see the package doc). A call that fails with a
// transport error (timeout, refused or broken connection) makes the limiter
// Degraded: it and every later call are decided by the FailurePolicy without
// touching Redis, until a background probe (PING with exponential back-off)
// reaches Redis again. A timed-out call may still have consumed its units in
// Redis; the fallback does not know it. With a Cluster client the limiter
// is degraded as a whole while any master is unreachable, and a transport
// error also asks the client to reload its slot map. Errors that Redis answers (a key
// holding foreign data, a script denied by an ACL) and unreadable replies
// are decided by the policy too, but do not degrade the limiter. No reply
// can make it panic.
//
// State keys (see the package doc) are written only when a request is
// admitted, always with a TTL: the time the state still matters plus one
// second of slack. A denial or a Peek writes nothing.
//
// Per-key limits (SetLimit) are kept in this process and sent with every
// call: configure them on every process. Units admitted while degraded stay
// local: they are not replayed into Redis on recovery.
//
// All methods are safe for concurrent use. Unlike the in-process limiters,
// every decision allocates (the key and arguments sent to Redis, a goroutine
// that bounds the call). Close stops the probe goroutine.
type Exact struct {
	client   RedisClient
	cfg      shardlimit.Config // defaults filled in; Limit is defLimit
	defLimit atomic.Int64
	prefix   string
	suffix   string        // of the state key: ":fw", ":sc" or ":gcra"
	script   *redis.Script // the algorithm's script
	window   int64         // W, microseconds
	bucket   int64         // G, microseconds (SlidingCounter)
	timeout  time.Duration
	policy   FailurePolicy
	fallback shardlimit.Limiter
	ownFb    bool // fallback built here: Close closes it
	probeMin time.Duration
	probeMax time.Duration
	onChange func(StateChange)

	// callerTime makes the scripts decide at AllowN's now instead of Redis
	// TIME. Tests set it to replay exact instants; it is not exported.
	callerTime bool

	mu     stdsync.RWMutex
	limits map[string]int // own limits (SetLimit)

	state   atomic.Int32
	trip    chan error // to the background goroutine; capacity 1
	backoff atomic.Int64

	allowed, denied                   atomic.Uint64
	calls, errs, timeouts, policyDecs atomic.Uint64
	trips, recoveries                 atomic.Uint64
	probes, probeFails                atomic.Uint64

	// gate orders calls against Close: a call registers in inflight under
	// gate's read lock only while the limiter is open, and Close sets
	// closed under the write lock before waiting for inflight.
	gate     stdsync.RWMutex
	inflight stdsync.WaitGroup

	closed    atomic.Bool
	closeOnce stdsync.Once
	stop      chan struct{}
	done      chan struct{}
}

var _ shardlimit.Limiter = (*Exact)(nil)

// NewExact returns an Exact limiter deciding through client. It does no I/O,
// so it returns at once whether or not Redis is reachable; the first call
// finds out. It starts one background goroutine (the reconnect probe); call
// Close to stop it.
//
// It returns an error wrapping shardlimit.ErrInvalidConfig if client is nil,
// cfg.Algorithm is SlidingLog or unknown, any field is out of range, or the
// window or bucket is not a whole number of microseconds.
func NewExact(client RedisClient, cfg ExactConfig) (*Exact, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil redis client", shardlimit.ErrInvalidConfig)
	}
	e := &Exact{client: client, limits: make(map[string]int)}
	switch cfg.Algorithm {
	case shardlimit.FixedWindow:
		e.script, e.suffix = fixedScript, ":fw"
	case shardlimit.SlidingCounter:
		e.script, e.suffix = counterScript, ":sc"
	case shardlimit.GCRA:
		e.script, e.suffix = gcraScript, ":gcra"
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
	e.defLimit.Store(int64(full.Limit))
	const us = int64(time.Microsecond)
	if int64(full.Window)%us != 0 {
		e.closeFallback()
		return nil, fmt.Errorf("%w: window %v is not a whole number of microseconds", shardlimit.ErrInvalidConfig, full.Window)
	}
	e.window = int64(full.Window) / us
	if full.Algorithm == shardlimit.SlidingCounter {
		g := int64(full.Window) / int64(full.Buckets)
		if g%us != 0 {
			e.closeFallback()
			return nil, fmt.Errorf("%w: bucket %v (window/buckets) is not a whole number of microseconds", shardlimit.ErrInvalidConfig, time.Duration(g))
		}
		e.bucket = g / us
	}
	e.trip = make(chan error, 1)
	e.stop = make(chan struct{})
	e.done = make(chan struct{})
	e.backoff.Store(int64(e.probeMin))
	go e.run()
	return e, nil
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
	return nil
}

func (e *Exact) closeFallback() {
	if e.ownFb && e.fallback != nil {
		_ = e.fallback.Close()
	}
}

// StateKey returns the Redis key holding key's state: <prefix>{<key>}:fw,
// :sc or :gcra by algorithm (hex-encoded after '#' if key has a brace).
func (e *Exact) StateKey(key string) string {
	return tagged(e.prefix, key) + e.suffix
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

// limitFor returns key's own limit or the default.
func (e *Exact) limitFor(key string) int {
	e.mu.RLock()
	lim, ok := e.limits[key]
	e.mu.RUnlock()
	if !ok {
		lim = int(e.defLimit.Load())
	}
	return lim
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
	lim := e.limitFor(key)
	if State(e.state.Load()) == Healthy {
		r, err := e.remote(ctx, key, now, n, lim, consume)
		if errors.Is(err, shardlimit.ErrClosed) {
			return shardlimit.Result{Err: shardlimit.ErrClosed}
		}
		if err == nil {
			if consume && r.Allowed && n > 0 && e.fallback != nil {
				e.fallback.AllowN(key, now, n) // record this process's usage
			}
			e.tally(consume, n, r)
			return r
		}
		if cerr := callerErr(ctx); cerr != nil {
			// The caller gave up; not a sign of Redis's health.
			return shardlimit.Result{Limit: lim, Err: cerr}
		}
		e.failed(err)
	}
	e.policyDecs.Add(1)
	r := e.byPolicy(key, now, n, lim, consume)
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

// remote runs the algorithm's script for one decision.
func (e *Exact) remote(ctx context.Context, key string, now time.Time, n, lim int, consume bool) (shardlimit.Result, error) {
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
	cost := min(n, shardlimit.MaxLimit+1)
	keys := []string{e.StateKey(key)}
	var args []any
	if e.bucket > 0 {
		args = []any{lim, cost, e.bucket, e.cfg.Buckets, c, at}
	} else {
		args = []any{lim, cost, e.window, c, at}
	}
	if !e.begin() {
		return shardlimit.Result{}, shardlimit.ErrClosed
	}
	e.calls.Add(1)
	v, err := call(ctx, func() (any, error) {
		return e.script.Run(ctx, e.client, keys, args...).Result()
	}, e.inflight.Done)
	if errors.Is(err, redis.Nil) {
		err = fmt.Errorf("%w: got nil, want an array", ErrBadReply)
	}
	if err != nil {
		return shardlimit.Result{}, err
	}
	return decodeDecision(v, lim, n)
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

// decodeDecision checks the reply {allowed, remaining, reset_us, retry_us}
// of a decision script and converts it to a Result.
func decodeDecision(v any, lim, n int) (shardlimit.Result, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) != 4 {
		return shardlimit.Result{}, fmt.Errorf("%w: got %T %v, want an array of 4 integers", ErrBadReply, v, v)
	}
	var x [4]int64
	for i, el := range arr {
		if x[i], ok = el.(int64); !ok {
			return shardlimit.Result{}, fmt.Errorf("%w: element %d is %T, want an integer", ErrBadReply, i, el)
		}
	}
	allowed, rem, reset, retry := x[0], x[1], x[2], x[3]
	const maxUs = int64(1<<63-1) / int64(time.Microsecond)
	switch {
	case allowed != 0 && allowed != 1,
		rem < 0 || rem > int64(lim),
		reset < 0 || reset > maxUs,
		retry < -1 || retry > maxUs,
		allowed == 1 && retry != 0,
		n == 0 && allowed == 0:
		return shardlimit.Result{}, fmt.Errorf("%w: inconsistent decision %v", ErrBadReply, x)
	}
	r := shardlimit.Result{
		Allowed:    allowed == 1,
		Limit:      lim,
		Remaining:  int(rem),
		ResetAfter: time.Duration(reset) * time.Microsecond,
	}
	switch {
	case retry == -1:
		r.RetryAfter = shardlimit.Never
	case !r.Allowed:
		r.RetryAfter = max(time.Duration(retry)*time.Microsecond, time.Microsecond)
	}
	return r, nil
}

// failed counts a failed call and degrades the limiter on a transport
// error.
func (e *Exact) failed(err error) {
	e.errs.Add(1)
	if isTimeout(err) {
		e.timeouts.Add(1)
	}
	if !transportError(err) {
		return // Redis answered: it is reachable
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

// isTimeout reports whether err is a timeout.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// byPolicy decides without Redis.
func (e *Exact) byPolicy(key string, now time.Time, n, lim int, consume bool) shardlimit.Result {
	switch e.policy {
	case FallbackLocal:
		if consume {
			return e.fallback.AllowN(key, now, n)
		}
		return e.fallback.Peek(key, now, n)
	case FailOpen:
		r := shardlimit.Result{Limit: lim, Remaining: lim}
		switch {
		case n > lim:
			r.RetryAfter = shardlimit.Never
		default:
			r.Allowed, r.Remaining = true, lim-n
		}
		return r
	}
	// FailClosed
	r := shardlimit.Result{Limit: lim}
	switch {
	case n == 0:
		r.Allowed = true
	case n > lim:
		r.RetryAfter = shardlimit.Never
	default:
		wait := time.Duration(e.backoff.Load())
		r.RetryAfter, r.ResetAfter = wait, wait
	}
	return r
}

// run is the background goroutine: it reports state changes and probes
// Redis while degraded, until Close.
func (e *Exact) run() {
	defer close(e.done)
	for {
		select {
		case <-e.stop:
			return
		case err := <-e.trip:
			e.notify(StateChange{From: Healthy, To: Degraded, Err: err, At: time.Now()})
			if !e.probe() {
				return
			}
			e.notify(StateChange{From: Degraded, To: Healthy, At: time.Now()})
		}
	}
}

// probe pings Redis with exponential back-off until it answers (true) or
// the limiter is closed (false).
func (e *Exact) probe() bool {
	d := e.probeMin
	for {
		e.backoff.Store(int64(d))
		t := time.NewTimer(d)
		select {
		case <-e.stop:
			t.Stop()
			return false
		case <-t.C:
		}
		if !e.begin() {
			return false
		}
		e.probes.Add(1)
		ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
		_, err := call(ctx, func() (any, error) { return e.client.Ping(ctx).Result() }, e.inflight.Done)
		cancel()
		if err == nil {
			e.backoff.Store(int64(e.probeMin))
			e.state.Store(int32(Healthy))
			e.recoveries.Add(1)
			return true
		}
		e.probeFails.Add(1)
		d = min(2*d, e.probeMax)
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

func checkExactLimit(limit int) error {
	if limit < 0 || limit > shardlimit.MaxLimit {
		return fmt.Errorf("%w: limit %d outside [0, %d]", shardlimit.ErrInvalidConfig, limit, shardlimit.MaxLimit)
	}
	return nil
}

// SetLimit gives key a limit of its own in [0, MaxLimit] (0 blocks the
// key), kept in this process until ClearLimit and passed to the fallback.
// Usage already counted in Redis counts against the new limit.
func (e *Exact) SetLimit(key string, limit int) error {
	if err := checkExactLimit(limit); err != nil {
		return err
	}
	if err := e.checkKey(key); err != nil {
		return err
	}
	e.mu.Lock()
	e.limits[key] = limit
	e.mu.Unlock()
	if e.fallback != nil {
		return e.fallback.SetLimit(key, limit)
	}
	return nil
}

// ClearLimit makes key use the default limit again, here and in the
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

// SetDefaultLimit changes the limit of every key without its own, in
// [0, MaxLimit], here and in the fallback.
func (e *Exact) SetDefaultLimit(limit int) error {
	if err := checkExactLimit(limit); err != nil {
		return err
	}
	if e.closed.Load() {
		return shardlimit.ErrClosed
	}
	e.defLimit.Store(int64(limit))
	if e.fallback != nil {
		return e.fallback.SetDefaultLimit(limit)
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
	sk := e.StateKey(key)
	if _, err := call(ctx, func() (any, error) { return e.client.Del(ctx, sk).Result() }, e.inflight.Done); err != nil {
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
		PolicyDecisions: e.policyDecs.Load(),
		Trips:           e.trips.Load(),
		Recoveries:      e.recoveries.Load(),
		Probes:          e.probes.Load(),
		ProbeFailures:   e.probeFails.Load(),
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

// Config returns the limiter configuration in effect, defaults filled in.
func (e *Exact) Config() shardlimit.Config {
	cfg := e.cfg
	cfg.Limit = int(e.defLimit.Load())
	return cfg
}

// Close stops the probe goroutine, waits for it and for Redis calls in
// flight, and closes the fallback if NewExact built it. A call abandoned at
// its Timeout is in flight until the client ends it: at once with
// ContextTimeoutEnabled, else by its ReadTimeout (see the package doc). Close
// is idempotent, always returns nil, and sends nothing to Redis; afterwards
// decisions return ErrClosed. The Redis client stays the caller's.
func (e *Exact) Close() error {
	e.closeOnce.Do(func() {
		e.gate.Lock()
		e.closed.Store(true)
		e.gate.Unlock()
		close(e.stop)
		<-e.done
		e.inflight.Wait()
		e.closeFallback()
	})
	return nil
}
