package sync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	stdsync "sync"
	"sync/atomic"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/core"
)

// Defaults of SharedConfig fields left zero.
const (
	DefaultFlushInterval = 50 * time.Millisecond
	DefaultFlushTimeout  = time.Second
	DefaultMaxBatch      = 1024
	DefaultFailAfter     = 2
)

// SharedConfig configures a Shared limiter. Its embedded Config takes the
// fields of shardlimit.Config with their meaning and defaults; Algorithm
// must be FixedWindow, SlidingCounter or SlidingLog (GCRA is shared in exact
// mode only: NewExact). Config.Rates may give several rates, each shared
// through counters of its own (see Shared); their windows must then be
// whole microseconds, which name them in the store.
type SharedConfig struct {
	shardlimit.Config

	// Backend is the shared store. If nil, NewShared builds a RedisBackend
	// over its client with Prefix.
	Backend Backend

	// Prefix starts every Redis key (see the package doc). Default
	// DefaultPrefix. Ignored when Backend is set.
	Prefix string

	// FlushInterval is how often the reconciler sends the units admitted
	// since the last flush and reads back the cluster's totals, in
	// [1ms, 1min]. Default 50ms. Other nodes' units reach this node's
	// decisions at most 2*(FlushInterval + a flush's round trip) late, for
	// keys it decides every interval or that are near their limit (see
	// Shared).
	FlushInterval time.Duration

	// FlushTimeout bounds each flush, in [1ms, 1min]. Default 1s.
	FlushTimeout time.Duration

	// MaxBatch is the most items sent in one pipeline, in [1, 1<<20];
	// a flush of more items sends several pipelines in turn. Default 1024.
	MaxBatch int

	// FailAfter is how many flushes in a row must fail (nothing applied) for
	// the limiter to become Degraded, in [1, 1000]. Default 2.
	FailAfter int

	// Policy decides while Degraded. FallbackLocal (the default) keeps
	// deciding in this process with the other nodes' last known units, which
	// age out with their buckets: N nodes then admit up to N times the limit.
	// FailOpen admits every request whose cost could ever be admitted;
	// FailClosed denies every request of positive cost.
	Policy FailurePolicy

	// FallbackLimit, if positive, is the default limit while Degraded under
	// FallbackLocal: a stricter per-node limit such as Limit/N for N nodes
	// bounds the cluster to about the limit while the store is down. Keys
	// with a limit of their own (SetLimit) keep it. In [0, MaxLimit]
	// ([0, MaxSlidingLogLimit] for SlidingLog). For a limiter of several
	// rates use FallbackLimits.
	FallbackLimit int

	// FallbackLimits, if set, are the default limits while Degraded under
	// FallbackLocal, one per rate in the order of Config.Rates (such as
	// each rate's limit/N), each in [1, MaxLimit] ([1, MaxSlidingLogLimit]
	// for SlidingLog). FallbackLimit must then be 0.
	FallbackLimits []int

	// EvictionCheck is how often the reconciler reads the store's
	// eviction state (INFO), in [1ms, 1h]; default 2s; negative: never.
	// While the store's evicted_keys grows the limiter is Degraded, with an
	// error wrapping ErrEvicting (see the package doc on eviction). Only a
	// RedisBackend can be read; another Backend's eviction is not watched.
	EvictionCheck time.Duration

	// OnStateChange, if set, is called on every change between Healthy and
	// Degraded, in order, from the reconciler goroutine. It must not block
	// for long and must not call Close.
	OnStateChange func(StateChange)
}

// SharedStats are a Shared limiter's counters since construction. With
// several rates (Config.Rates) every admitted unit counts in each rate's
// counters, so the unit counts (SentUnits, RetriedUnits, UnknownUnits,
// DroppedUnits) count it once per rate: for each rate, every unit admitted
// is sent, retried until sent, unknown or dropped.
type SharedStats struct {
	State         State         // state now
	Flushes       uint64        // flushes that sent at least one item
	FailedFlushes uint64        // of which nothing was applied
	Items         uint64        // items sent (one per key, rate and bucket)
	ItemErrors    uint64        // items not applied
	BadReplies    uint64        // of which the store's reply was unreadable (ErrBadReply)
	LastKeys      int           // keys in the last flush
	NearKeys      int           // of which read because near their limit (see Shared), decided or not
	LastLatency   time.Duration // duration of the last flush
	MaxLatency    time.Duration // longest flush
	MaxFlushGap   time.Duration // longest time between the starts of two flushes while Healthy: FlushInterval plus the flush between and any lateness of the goroutine's timer
	SentUnits     uint64        // units sent and applied
	RetriedUnits  uint64        // units that provably did not reach the store, sent again later
	UnknownUnits  uint64        // units whose reply was lost (healed by the next flush's floor)
	DroppedUnits  uint64        // units whose bucket ended before they could be sent, or that the final flush of Close or Shutdown provably did not send
	Trips         uint64        // changes Healthy -> Degraded
	Recoveries    uint64        // changes Degraded -> Healthy
	ClockOffset   time.Duration // store clock minus local clock, last measured
	Pending       int           // keys waiting for the next flush

	// LastError is the most recent failure of an item, a flush or a probe
	// of the store, nil if there was none. It wraps ErrUnavailable,
	// ErrRejected or ErrBadReply and the error that caused it.
	LastError error

	// Eviction is what the reconciler knows of the store's key eviction.
	Eviction Eviction
}

// Shared is a shardlimit.Limiter whose counts are shared, approximately,
// with every other process using the same store. Each request is decided in
// this process, with no round trip: a key's local units plus the other
// nodes' units last read from the store must fit the limit. A reconciler
// goroutine, every FlushInterval, collects the keys decided since the last
// flush shard by shard, sends one atomic increment-and-expire per key and
// bucket in pipelines of at most MaxBatch, and reads back the cluster's
// totals; at most one flush is in flight.
//
// Accuracy: at every flush a node reads the store's totals of the keys it
// decided since its last flush and of the keys near their limit, decided
// or not: keys the other nodes admitted units of whose room left is at
// most twice what the others admit per unit this node admits, plus one (at
// most one more read per such key and flush). For those keys it sees the
// others at most D = 2*(T + d) late, T the flush interval (on a loaded
// machine, what SharedStats.MaxFlushGap reports) and d a flush's round
// trip, at any request rate; a window then admits at most the limit L plus
// what the other nodes admitted in the D before this node's last admission
// in it: with N nodes each offered R units/s, min(N*L, L + (N-1)*R*D),
// plus units lost to store faults. With several rates (Config.Rates) each
// rate is shared with counters of its own and holds its own bound: rate
// k's window admits at most min(N*L_k, L_k + (N-1)*R*D), a request any
// rate denies consumes from none, and a key is near its limit when any of
// its rates is. A key this node has not admitted in its window (idle here)
// is brought up to date by the flush after its next decision: its first
// decisions after the gap can overshoot by what the others admitted
// meanwhile. With one node it is exactly the local
// algorithm. The fixed window shares its window's count; the sliding
// counter its buckets'; the sliding log keeps its exact local log and adds
// the other nodes' units by Buckets sub-windows, weighted as the counter
// does.
//
// Failures: decisions never wait for the store. A flush that provably did
// not reach the store is retried; one whose reply was lost is healed at the
// next flush, which raises the store's counter to at least what this node
// sent (so a store that restarted empty is healed too, to the largest one
// node's contribution: with several nodes the others' lost units are not
// restored); units of buckets that ended first are dropped and counted. After FailAfter failed flushes
// in a row the limiter is Degraded, decides by Policy, and flushes with
// back-off until the store answers. It is Degraded too while the store
// evicts keys (see the package doc on eviction).
//
// All methods are safe for concurrent use. Close (or Shutdown with a
// deadline) flushes once, stops the reconciler and closes the local limiter.
type Shared struct {
	core     core.Synced // the local limiter, with the sync state
	tab      core.Synced // core, as the reconciler uses it
	backend  Backend
	clock    shardlimit.Clock
	interval time.Duration
	timeout  time.Duration
	maxBatch int
	failMax  int
	policy   FailurePolicy
	fbLimits []int // the default limits while Degraded (FallbackLocal), nil for none
	onChange func(StateChange)
	alg      shardlimit.Algorithm
	rates    []core.SyncRate // the limiter's rates, longest window first
	watch    *evictionWatch

	defMu     stdsync.Mutex
	defLimits []int // the configured default limits, as Config.Rates (not the fallback)

	state    atomic.Int32
	flushMu  stdsync.Mutex // one flush at a time (the loop and Shutdown)
	failures int           // flushes failed in a row; under flushMu
	evicting error         // the store is evicting keys; under flushMu

	// keys near their limit at the last flush, read at the next; under
	// flushMu
	near []string

	// scratch, reused by flushes under flushMu
	flushes []core.Flush
	items   []Item
	owners  []owner
	results []ItemResult

	flushCount, failedFlushes, itemCount, itemErrs atomic.Uint64
	badReplies                                     atomic.Uint64
	lastErr                                        lastError
	sentUnits, retried, unknown, dropped           atomic.Uint64
	trips, recoveries                              atomic.Uint64
	lastKeys, lastNear                             atomic.Int64
	lastLatency, maxLatency, offset                atomic.Int64
	maxGap                                         atomic.Int64

	closed     atomic.Bool
	closeOnce  stdsync.Once
	loopCtx    context.Context // parent of the reconciler's flushes
	loopCancel context.CancelFunc
	closeErr   error
	stop       chan struct{}
	done       chan struct{}
}

// owner ties an item to its flush and bucket index.
type owner struct {
	flush, bucket int
}

var _ shardlimit.Limiter = (*Shared)(nil)

// NewShared returns a Shared limiter reaching the store through client (or
// cfg.Backend). It does no I/O, so it returns at once whether or not the
// store is reachable. It starts the reconciler goroutine; call Close.
//
// It returns an error wrapping shardlimit.ErrInvalidConfig if both client
// and cfg.Backend are nil, cfg.Algorithm is GCRA or unknown, or any field is
// out of range.
func NewShared(client RedisClient, cfg SharedConfig) (*Shared, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{shardlimit.ErrInvalidConfig}, args...)...)
	}
	s := &Shared{backend: cfg.Backend}
	if s.backend == nil {
		if client == nil {
			return nil, bad("nil redis client and no backend")
		}
		b, err := NewRedisBackend(client, cfg.Prefix)
		if err != nil {
			return nil, err
		}
		s.backend = b
	}
	s.interval = cmp0(cfg.FlushInterval, DefaultFlushInterval)
	s.timeout = cmp0(cfg.FlushTimeout, DefaultFlushTimeout)
	if s.interval < time.Millisecond || s.interval > time.Minute {
		return nil, bad("flush interval %v outside [1ms, 1m]", s.interval)
	}
	if s.timeout < time.Millisecond || s.timeout > time.Minute {
		return nil, bad("flush timeout %v outside [1ms, 1m]", s.timeout)
	}
	s.maxBatch = cmp0(cfg.MaxBatch, DefaultMaxBatch)
	if s.maxBatch < 1 || s.maxBatch > 1<<20 {
		return nil, bad("max batch %d outside [1, %d]", s.maxBatch, 1<<20)
	}
	s.failMax = cmp0(cfg.FailAfter, DefaultFailAfter)
	if s.failMax < 1 || s.failMax > 1000 {
		return nil, bad("fail after %d outside [1, 1000]", s.failMax)
	}
	if cfg.Policy < FallbackLocal || cfg.Policy > FailClosed {
		return nil, bad("unknown failure policy %d", int(cfg.Policy))
	}
	s.policy = cfg.Policy
	s.alg = cfg.Algorithm
	rates := max(1, len(cfg.Rates))
	switch {
	case cfg.FallbackLimit < 0 || cfg.FallbackLimit > s.maxLimit():
		return nil, bad("fallback limit %d outside [0, %d]", cfg.FallbackLimit, s.maxLimit())
	case cfg.FallbackLimit > 0 && cfg.FallbackLimits != nil:
		return nil, bad("both FallbackLimit and FallbackLimits set")
	case cfg.FallbackLimit > 0 && rates > 1:
		return nil, bad("FallbackLimit set for %d rates: set FallbackLimits", rates)
	case cfg.FallbackLimit > 0:
		s.fbLimits = []int{cfg.FallbackLimit}
	case cfg.FallbackLimits != nil:
		if len(cfg.FallbackLimits) != rates {
			return nil, bad("%d fallback limits for %d rates", len(cfg.FallbackLimits), rates)
		}
		for _, l := range cfg.FallbackLimits {
			if l < 1 || l > s.maxLimit() {
				return nil, bad("fallback limit %d outside [1, %d]", l, s.maxLimit())
			}
		}
		s.fbLimits = slices.Clone(cfg.FallbackLimits)
	}
	if rates > 1 {
		// The Redis keys of a rate name its window in microseconds.
		for _, r := range cfg.Rates {
			if r.Window%time.Microsecond != 0 {
				return nil, bad("window %v of several rates is not a whole number of microseconds", r.Window)
			}
		}
	}
	s.onChange = cfg.OnStateChange
	every := cmp0(cfg.EvictionCheck, DefaultEvictionCheck)
	if every > time.Hour || every >= 0 && every < time.Millisecond {
		return nil, bad("eviction check %v outside [1ms, 1h]", every)
	}
	var why error
	if _, ok := s.backend.(evictionReader); !ok {
		why = errors.New("the Backend cannot read the store's INFO")
	} else if rb, ok := s.backend.(*RedisBackend); ok && !canReadEviction(rb.client) {
		why = errNoInfo
	}
	s.watch = newEvictionWatch(every, why)
	tab, err := core.NewSynced(coreConfig(cfg.Config))
	if err != nil {
		return nil, err
	}
	s.tab = tab
	s.core = tab
	full := s.core.Config()
	s.clock = full.Clock
	for _, r := range full.Rates {
		s.defLimits = append(s.defLimits, r.Limit)
	}
	if len(full.Rates) == 0 {
		s.defLimits = []int{full.Limit}
	}
	s.rates = tab.SyncRates()
	s.stop = make(chan struct{})
	s.done = make(chan struct{})
	s.loopCtx, s.loopCancel = context.WithCancel(context.Background())
	go s.run()
	return s, nil
}

// maxLimit returns the largest limit of the limiter's algorithm.
func (s *Shared) maxLimit() int {
	if s.alg == shardlimit.SlidingLog {
		return shardlimit.MaxSlidingLogLimit
	}
	return shardlimit.MaxLimit
}

func cmp0[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// degraded reports whether decisions follow FailOpen or FailClosed now.
func (s *Shared) degraded() bool {
	return s.policy != FallbackLocal && State(s.state.Load()) == Degraded
}

// byPolicy decides n units under FailOpen or FailClosed.
func (s *Shared) byPolicy(key string, now time.Time, n int) shardlimit.Result {
	r := shardlimit.Result(s.core.Peek(key, now, 0))
	if r.Err != nil {
		return r
	}
	if n < 0 {
		return shardlimit.Result{Err: shardlimit.ErrInvalidCost}
	}
	switch {
	case n == 0:
		r.Allowed = true
	case n > r.Limit || len(s.rates) > 1 && s.core.Peek(key, now, n).RetryAfter == shardlimit.Never:
		// No wait can admit it (above a rate's limit).
		r.Allowed, r.RetryAfter = false, shardlimit.Never
	case s.policy == FailOpen:
		r.Allowed, r.Remaining = true, r.Limit-n
	default:
		r.Allowed, r.RetryAfter = false, s.interval
	}
	return r
}

// Allow reports whether one request for key may happen now (Config.Clock).
func (s *Shared) Allow(key string) bool {
	if s.degraded() {
		return s.byPolicy(key, s.clock.Now(), 1).Allowed
	}
	return s.core.Allow(key)
}

// AllowAt reports whether one request for key may happen at now, counting
// the other nodes' units last read from the store. See shardlimit.Limiter.
func (s *Shared) AllowAt(key string, now time.Time) bool {
	if s.degraded() {
		return s.byPolicy(key, now, 1).Allowed
	}
	return s.core.AllowAt(key, now)
}

// AllowBytesAt is AllowAt for a []byte key; it does not allocate for a
// stored key and never retains key.
func (s *Shared) AllowBytesAt(key []byte, now time.Time) bool {
	if s.degraded() {
		return s.byPolicy(string(key), now, 1).Allowed
	}
	return s.core.AllowBytesAt(key, now)
}

// AllowN decides whether n units for key may happen at now, counting the
// other nodes' units last read from the store. See shardlimit.Limiter.
func (s *Shared) AllowN(key string, now time.Time, n int) shardlimit.Result {
	if s.degraded() {
		return s.byPolicy(key, now, n)
	}
	return shardlimit.Result(s.core.AllowN(key, now, n))
}

// AllowBytes is Allow for a []byte key; it does not allocate for a stored
// key and never retains key.
func (s *Shared) AllowBytes(key []byte) bool {
	if s.degraded() {
		return s.byPolicy(string(key), s.clock.Now(), 1).Allowed
	}
	return s.core.AllowBytes(key)
}

// AllowBytesN is AllowN for a []byte key; it does not allocate for a stored
// key and never retains key.
func (s *Shared) AllowBytesN(key []byte, now time.Time, n int) shardlimit.Result {
	if s.degraded() {
		return s.byPolicy(string(key), now, n)
	}
	return shardlimit.Result(s.core.AllowBytesN(key, now, n))
}

// AllowNow is AllowN at the limiter's Clock. See shardlimit.Limiter.
func (s *Shared) AllowNow(key string, n int) shardlimit.Result {
	if s.degraded() {
		return s.byPolicy(key, s.clock.Now(), n)
	}
	return shardlimit.Result(s.core.AllowNow(key, n))
}

// AllowBytesNow is AllowNow for a []byte key; it does not allocate for a
// stored key and never retains key.
func (s *Shared) AllowBytesNow(key []byte, n int) shardlimit.Result {
	if s.degraded() {
		return s.byPolicy(string(key), s.clock.Now(), n)
	}
	return shardlimit.Result(s.core.AllowBytesNow(key, n))
}

// Peek reports what AllowN(key, now, n) would decide, consuming nothing.
func (s *Shared) Peek(key string, now time.Time, n int) shardlimit.Result {
	return shardlimit.Result(s.core.Peek(key, now, n))
}

// SetLimit gives key a limit of its own in this process; set it on every
// node. See shardlimit.Limiter.
func (s *Shared) SetLimit(key string, limit int) error { return s.core.SetLimit(key, limit) }

// SetLimits gives key limits of its own in this process, one per rate in
// the order of Config.Rates; set them on every node. See
// shardlimit.Limiter.
func (s *Shared) SetLimits(key string, limits ...int) error { return s.core.SetLimits(key, limits...) }

// ClearLimit makes key use the default limit again.
func (s *Shared) ClearLimit(key string) error { return s.core.ClearLimit(key) }

// SetDefaultLimits changes the limits of every key without its own, one
// per rate in the order of Config.Rates; while Degraded with fallback
// limits, they take effect on recovery. It returns an error wrapping
// shardlimit.ErrInvalidConfig if the count of limits is not the count of
// rates or a limit is out of range.
func (s *Shared) SetDefaultLimits(limits ...int) error {
	if len(limits) != len(s.defLimits) {
		return fmt.Errorf("%w: %d limits for %d rates", shardlimit.ErrInvalidConfig, len(limits), len(s.defLimits))
	}
	for _, l := range limits {
		if l < 0 || l > s.maxLimit() {
			return fmt.Errorf("%w: limit %d outside [0, %d]", shardlimit.ErrInvalidConfig, l, s.maxLimit())
		}
	}
	s.defMu.Lock()
	defer s.defMu.Unlock()
	if State(s.state.Load()) == Degraded && s.fbLimits != nil && s.policy == FallbackLocal {
		if err := s.core.SetDefaultLimits(s.fbLimits...); err != nil {
			return err
		}
	} else if err := s.core.SetDefaultLimits(limits...); err != nil {
		return err
	}
	copy(s.defLimits, limits)
	return nil
}

// SetDefaultLimit changes the limit of every key without its own: it is
// SetDefaultLimits(limit), for a limiter of one rate.
func (s *Shared) SetDefaultLimit(limit int) error { return s.SetDefaultLimits(limit) }

// Reset forgets key's local usage in this process (not in the store).
func (s *Shared) Reset(key string) error { return s.core.Reset(key) }

// Len returns the number of keys stored in this process.
func (s *Shared) Len() int { return s.core.Len() }

// Stats returns the local limiter's counters.
func (s *Shared) Stats() shardlimit.Stats { return shardlimit.Stats(s.core.Stats()) }

// Sweep evicts idle keys of the local limiter; see shardlimit.Limiter.
func (s *Shared) Sweep(now time.Time) int { return s.core.Sweep(now) }

// Config returns the configuration of the local limiter.
func (s *Shared) Config() shardlimit.Config { return publicConfig(s.core.Config()) }

// State returns the health of the link to the store.
func (s *Shared) State() State { return State(s.state.Load()) }

// SharedStats returns the reconciler's counters.
func (s *Shared) SharedStats() SharedStats {
	dropped, pending := s.tab.SyncStats()
	return SharedStats{
		State:         State(s.state.Load()),
		Flushes:       s.flushCount.Load(),
		FailedFlushes: s.failedFlushes.Load(),
		Items:         s.itemCount.Load(),
		ItemErrors:    s.itemErrs.Load(),
		BadReplies:    s.badReplies.Load(),
		LastKeys:      int(s.lastKeys.Load()),
		NearKeys:      int(s.lastNear.Load()),
		LastLatency:   time.Duration(s.lastLatency.Load()),
		MaxLatency:    time.Duration(s.maxLatency.Load()),
		MaxFlushGap:   time.Duration(s.maxGap.Load()),
		SentUnits:     s.sentUnits.Load(),
		RetriedUnits:  s.retried.Load(),
		UnknownUnits:  s.unknown.Load(),
		DroppedUnits:  s.dropped.Load() + dropped,
		Trips:         s.trips.Load(),
		Recoveries:    s.recoveries.Load(),
		ClockOffset:   time.Duration(s.offset.Load()),
		Pending:       pending,
		LastError:     s.lastErr.get(),
		Eviction:      s.watch.stats(),
	}
}

// Flush sends what is pending now instead of at the next interval and
// returns when it is done or ctx is, with an error if items were sent and
// none was applied: it wraps ErrUnavailable, ErrRejected or ErrBadReply
// (by the first failed item) and that item's error. It is what Close does
// last.
func (s *Shared) Flush(ctx context.Context) error {
	if s.closed.Load() {
		return shardlimit.ErrClosed
	}
	if err := s.flush(ctx, false); !errors.Is(err, errNothingSent) {
		return err
	}
	return nil
}

// Close flushes once within FlushTimeout, stops the reconciler and closes
// the local limiter. It is idempotent; later calls return the first's
// result. Decisions after Close return shardlimit.ErrClosed.
func (s *Shared) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	return s.Shutdown(ctx)
}

// Shutdown is Close with the final flush bounded by ctx instead of
// FlushTimeout. It never waits longer than ctx allows for the store. Units
// the final flush provably did not send (ctx had ended, the store refused
// them) are counted in SharedStats.DroppedUnits.
func (s *Shared) Shutdown(ctx context.Context) error {
	s.closeOnce.Do(func() {
		close(s.stop)
		select {
		case <-s.done:
		case <-ctx.Done():
			// The reconciler is in a flush to a slow store: end it now
			// (its items become MaybeApplied, sent again as floors below).
			s.loopCancel()
			<-s.done
		}
		s.loopCancel()
		err := s.flush(ctx, true)
		if errors.Is(err, errNothingSent) {
			err = nil
		}
		s.closed.Store(true)
		if cerr := s.core.Close(); err == nil {
			err = cerr
		}
		s.closeErr = err
	})
	return s.closeErr
}

// run is the reconciler: a flush every interval, with back-off while
// Degraded, until Close.
func (s *Shared) run() {
	defer close(s.done)
	timer := time.NewTimer(s.interval)
	defer timer.Stop()
	backoff := s.interval
	lastOffset := time.Time{}
	var lastStart time.Time // of the previous flush, zero unless Healthy after it
	for {
		select {
		case <-s.stop:
			return
		case <-timer.C:
		}
		start := time.Now()
		if !lastStart.IsZero() {
			if gap := int64(start.Sub(lastStart)); gap > s.maxGap.Load() {
				s.maxGap.Store(gap) // only this goroutine writes it
			}
		}
		ctx, cancel := context.WithTimeout(s.loopCtx, s.timeout)
		err := s.flush(ctx, false)
		if errors.Is(err, errNothingSent) && s.failing() {
			// Idle while degraded, or after a failed flush whose items
			// are all gone (their buckets ended): probe the store's clock
			// instead, so that the state follows the store without
			// traffic.
			err = storeError(s.measureOffset(ctx))
			s.flushMu.Lock()
			if err != nil {
				s.lastErr.set(err)
			}
			s.record(err)
			s.flushMu.Unlock()
		} else if time.Since(lastOffset) > 10*time.Second && err == nil {
			lastOffset = time.Now()
			_ = s.measureOffset(ctx)
		}
		cancel()
		if s.watch.on() && s.watch.wait(time.Now()) == 0 {
			ctx, cancel := context.WithTimeout(s.loopCtx, s.timeout)
			evErr := s.watch.check(ctx, s.backend.(evictionReader).evictionInfo)
			cancel()
			s.flushMu.Lock()
			s.setEvicting(evErr)
			s.flushMu.Unlock()
		}
		if s.down() {
			backoff = min(2*backoff, max(s.interval, time.Second))
			lastStart = time.Time{}
		} else {
			backoff = s.interval
			lastStart = start
		}
		timer.Reset(backoff)
	}
}

// zeroDelta is the Deltas of a Restore that only queues a key again.
var zeroDelta = [1]uint32{0}

// failing reports whether the last flush or probe failed.
func (s *Shared) failing() bool {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	return s.failures > 0
}

// down reports whether enough flushes failed in a row to degrade the
// limiter.
func (s *Shared) down() bool {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	return s.failures >= s.failMax
}

// errNothingSent is flush's answer when no key had a decision.
var errNothingSent = errors.New("nothing to send")

// measureOffset reads the store's clock and records its offset to ours.
func (s *Shared) measureOffset(ctx context.Context) error {
	before := time.Now()
	st, err := s.backend.Time(ctx)
	if err != nil {
		return err
	}
	after := time.Now()
	s.offset.Store(int64(st.Sub(before.Add(after.Sub(before) / 2))))
	return nil
}

// flush sends every pending key once. The final flush (Shutdown's) counts
// the units it provably did not send as dropped: nothing will retry them.
func (s *Shared) flush(ctx context.Context, final bool) error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	start := time.Now()
	nowTime := s.clock.Now()
	now := nowTime.UnixNano()
	// Keys near their limit are read every flush, decided or not, in the
	// bucket of now.
	s.lastNear.Store(int64(len(s.near)))
	for _, key := range s.near {
		s.tab.Touch(key, now)
	}
	clear(s.near)
	s.near = s.near[:0]
	s.flushes = s.flushes[:0]
	for i := range s.tab.Shards() {
		s.flushes = s.tab.Collect(i, s.flushes)
	}
	s.items, s.owners = s.items[:0], s.owners[:0]
	for fi := range s.flushes {
		f := &s.flushes[fi]
		rate := &s.rates[f.Rate]
		m, size := rate.Count, rate.Size
		var window time.Duration // names the rate's counters if there are several
		if len(s.rates) > 1 {
			window = time.Duration(rate.Window)
		}
		for k := range m {
			id := f.Newest - int64(m-1-k)
			newest := k == m-1
			if f.Deltas[k] == 0 && !newest {
				continue
			}
			// Bucket id counts until (id+m)*size; keep it one bucket and a
			// second longer for nodes whose clocks lag.
			end := (id + int64(m)) * size
			if end <= now {
				s.dropped.Add(uint64(f.Deltas[k]))
				if f.Deltas[k] != 0 {
					// Collect counted them sent: take them out of the
					// floor, or a later flush of the bucket (the clock
					// came back) would write what was counted dropped.
					s.tab.Forget(&core.Flush{Key: f.Key, Rate: f.Rate, Newest: id, Deltas: []uint32{f.Deltas[k]}})
				}
				continue
			}
			span := 0
			if newest {
				span = m - 1
			}
			s.items = append(s.items, Item{
				Key: f.Key, Window: window, ID: id, Delta: f.Deltas[k], Floor: int64(f.Sent[k]),
				TTL:  time.Duration(end-now+size) + time.Second,
				Span: span,
			})
			s.owners = append(s.owners, owner{fi, k})
		}
	}
	s.lastKeys.Store(int64(len(s.flushes)))
	if len(s.items) == 0 {
		return errNothingSent
	}
	applied := 0
	var firstErr error
	for lo := 0; lo < len(s.items); lo += s.maxBatch {
		hi := min(lo+s.maxBatch, len(s.items))
		s.results = s.backend.Add(ctx, s.items[lo:hi], s.results)
		if len(s.results) != hi-lo {
			// A Backend breaking its contract: which result is whose is
			// unknown, so nothing is proven applied.
			err := fmt.Errorf("%w: backend returned %d results for %d items", ErrBadReply, len(s.results), hi-lo)
			s.results = sizeResults(s.results, hi-lo)
			for i := range s.results {
				s.results[i].Err = err
			}
		}
		for i := range s.results {
			res := &s.results[i]
			it := &s.items[lo+i]
			o := s.owners[lo+i]
			f := &s.flushes[o.flush]
			switch res.Outcome {
			case Applied:
				applied++
				s.sentUnits.Add(uint64(it.Delta))
				if it.Span > 0 || s.rates[f.Rate].Count == 1 {
					s.tab.Apply(f, res.Totals)
					if !final && s.nearLimit(f, res.Totals, now) &&
						(len(s.near) == 0 || s.near[len(s.near)-1] != f.Key) { // one key's rates are together
						s.near = append(s.near, f.Key)
					}
				} else {
					s.tab.Apply(&core.Flush{Key: f.Key, Rate: f.Rate, Newest: it.ID}, []int64{res.Total})
				}
			case NotApplied:
				s.itemErrs.Add(1)
				firstErr = cmpErr(firstErr, res.Err)
				if final {
					s.dropped.Add(uint64(it.Delta))
					continue
				}
				if it.Delta > 0 {
					s.retried.Add(uint64(it.Delta))
					s.tab.Restore(&core.Flush{Key: f.Key, Rate: f.Rate, Newest: it.ID, Deltas: []uint32{it.Delta}})
				} else {
					// A read or a heal (floor only) that did not run: the
					// key is collected again, or a counter an earlier lost
					// reply left short would never be healed.
					s.tab.Restore(&core.Flush{Key: f.Key, Rate: f.Rate, Newest: it.ID, Deltas: zeroDelta[:]})
				}
			default:
				s.itemErrs.Add(1)
				if errors.Is(res.Err, ErrBadReply) {
					s.badReplies.Add(1)
				}
				s.unknown.Add(uint64(it.Delta))
				firstErr = cmpErr(firstErr, res.Err)
				// The store may or may not have these units. Sending them
				// again could count them twice; instead the key is
				// collected again with nothing to add, so the next flush's
				// floor (all this node sent for its newest bucket) heals
				// the counter if they were lost, even if the key sees no
				// further traffic.
				s.tab.Restore(&core.Flush{Key: f.Key, Rate: f.Rate, Newest: it.ID, Deltas: zeroDelta[:]})
			}
		}
	}
	s.flushCount.Add(1)
	s.itemCount.Add(uint64(len(s.items)))
	d := time.Since(start)
	s.lastLatency.Store(int64(d))
	if int64(d) > s.maxLatency.Load() {
		s.maxLatency.Store(int64(d))
	}
	var err error
	if firstErr != nil {
		err = storeError(firstErr)
		s.lastErr.set(err)
	}
	if applied > 0 {
		s.record(nil)
		return nil
	}
	s.failedFlushes.Add(1)
	err = fmt.Errorf("%w (no item of %d applied)", err, len(s.items))
	s.record(err)
	return err
}

// nearLimit reports whether key f, whose buckets' cluster totals of rate
// f.Rate are totals (as f.Sent, oldest first), is near that rate's limit:
// the other nodes admitted units of it and the rate's room left is at most
// what they admit, at their pace so far, in twice the time this node takes
// to admit one, plus one. Such a key is read at every flush (Touch queues
// it, with all its rates), so a node that decides it seldom never decides
// it on a view older than two flushes: without that its view is as old as
// its last decision.
func (s *Shared) nearLimit(f *core.Flush, totals []int64, now int64) bool {
	if len(totals) != len(f.Sent) {
		return false
	}
	var local, remote int64
	for i, total := range totals {
		local += int64(f.Sent[i])
		remote += max(0, total-int64(f.Sent[i]))
	}
	if local == 0 || remote == 0 {
		return false
	}
	rem, ok := s.tab.Remaining(f.Key, now, f.Rate)
	return ok && int64(rem) <= (2*remote+local-1)/local+1
}

func cmpErr(first, err error) error {
	if first == nil {
		return err
	}
	return first
}

// record updates the health after a flush or probe that failed with err
// (nil: it succeeded). Requires s.flushMu held.
func (s *Shared) record(err error) {
	if err == nil {
		s.failures = 0
	} else {
		s.failures++
	}
	s.update(err)
}

// setEvicting records the outcome of an eviction check: err wraps
// ErrEvicting while the store evicts keys, nil once it has stopped.
// Requires s.flushMu held.
func (s *Shared) setEvicting(err error) {
	s.evicting = err
	s.update(err)
}

// update moves the state to what the failures and the eviction say; cause
// is the error that changed them. Requires s.flushMu held.
func (s *Shared) update(cause error) {
	if s.failures >= s.failMax || s.evicting != nil {
		if cause == nil {
			cause = s.evicting
		}
		if s.state.CompareAndSwap(int32(Healthy), int32(Degraded)) {
			s.trips.Add(1)
			s.applyFallback(true)
			s.notify(StateChange{From: Healthy, To: Degraded, Err: cause, At: time.Now()})
		}
		return
	}
	if s.state.CompareAndSwap(int32(Degraded), int32(Healthy)) {
		s.recoveries.Add(1)
		s.applyFallback(false)
		s.notify(StateChange{From: Degraded, To: Healthy, At: time.Now()})
	}
}

// applyFallback switches the default limits to the fallback limits and
// back.
func (s *Shared) applyFallback(on bool) {
	if s.fbLimits == nil || s.policy != FallbackLocal {
		return
	}
	s.defMu.Lock()
	defer s.defMu.Unlock()
	if on {
		_ = s.core.SetDefaultLimits(s.fbLimits...)
	} else {
		_ = s.core.SetDefaultLimits(s.defLimits...)
	}
}

func (s *Shared) notify(c StateChange) {
	if s.onChange != nil {
		s.onChange(c)
	}
}

// coreConfig returns cfg as internal/core's Config, the same fields, for
// core.NewSynced.
func coreConfig(cfg shardlimit.Config) core.Config {
	c := core.Config{
		Algorithm:       core.Algorithm(cfg.Algorithm),
		Limit:           cfg.Limit,
		Window:          cfg.Window,
		Buckets:         cfg.Buckets,
		Shards:          cfg.Shards,
		MaxKeys:         cfg.MaxKeys,
		WhenFull:        core.FullPolicy(cfg.WhenFull),
		MaxKeyBytes:     cfg.MaxKeyBytes,
		JanitorInterval: cfg.JanitorInterval,
		Clock:           cfg.Clock,
	}
	for _, r := range cfg.Rates {
		c.Rates = append(c.Rates, core.Rate(r))
	}
	return c
}

// publicConfig returns c, the local limiter's configuration, as a
// shardlimit.Config.
func publicConfig(c core.Config) shardlimit.Config {
	cfg := shardlimit.Config{
		Algorithm:       shardlimit.Algorithm(c.Algorithm),
		Limit:           c.Limit,
		Window:          c.Window,
		Buckets:         c.Buckets,
		Shards:          c.Shards,
		MaxKeys:         c.MaxKeys,
		WhenFull:        shardlimit.FullPolicy(c.WhenFull),
		MaxKeyBytes:     c.MaxKeyBytes,
		JanitorInterval: c.JanitorInterval,
		Clock:           c.Clock,
	}
	for _, r := range c.Rates {
		cfg.Rates = append(cfg.Rates, shardlimit.Rate(r))
	}
	return cfg
}
