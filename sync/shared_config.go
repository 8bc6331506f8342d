package sync

import (
	"fmt"
	"slices"
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
	// The reconciler is the store's (see the package doc): it reads INFO
	// once for all the store's limiters, at the shortest EvictionCheck
	// among them and at most once a second.
	// While the store's evicted_keys grows the limiter is Degraded, with an
	// error wrapping ErrEvicting (see the package doc on eviction). Only a
	// RedisBackend can be read; another Backend's eviction is not watched.
	EvictionCheck time.Duration

	// HealthInterval is the interval over which the limiter measures the
	// share of its store items that failed (see State), in [1ms, 1h];
	// default DefaultHealthInterval (1s).
	HealthInterval time.Duration

	// OnStateChange, if set, is called on every change between Healthy and
	// Degraded, in order, from the store's background goroutine (see
	// Shared), or from a goroutine calling Flush, Close or Shutdown. It
	// must not block for long and must not call Close or Shutdown of any
	// limiter.
	OnStateChange func(StateChange)
}

// NewShared returns a Shared limiter reaching the store through client (or
// cfg.Backend). It does no I/O, so it returns at once whether or not the
// store is reachable. It joins the background goroutine of the store's
// limiters (see the package doc), starting it if it is the first; call
// Close.
//
// It returns an error wrapping shardlimit.ErrInvalidConfig if both client
// and cfg.Backend are nil, cfg.Algorithm is GCRA or unknown, or any field is
// out of range.
func NewShared(client RedisClient, cfg SharedConfig) (*Shared, error) {
	s := &Shared{backend: cfg.Backend, node: newNodeID()}
	if s.backend == nil {
		if client == nil {
			return nil, badConfig("nil redis client and no backend")
		}
		b, err := NewRedisBackend(client, cfg.Prefix)
		if err != nil {
			return nil, err
		}
		s.backend = b
	}
	if err := s.setFlushes(&cfg); err != nil {
		return nil, err
	}
	if err := s.setFallback(&cfg); err != nil {
		return nil, err
	}
	if err := checkWindows(cfg.Rates); err != nil {
		return nil, err
	}
	s.onChange = cfg.OnStateChange
	if err := s.setWatch(cfg.EvictionCheck); err != nil {
		return nil, err
	}
	if err := s.setLocal(cfg.Config); err != nil {
		return nil, err
	}
	share, err := newShareWatch(cfg.HealthInterval)
	if err != nil {
		_ = s.core.Close()
		return nil, err
	}
	s.share = share
	s.join()
	return s, nil
}

// badConfig returns an error wrapping shardlimit.ErrInvalidConfig with the
// message format makes of args.
func badConfig(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{shardlimit.ErrInvalidConfig}, args...)...)
}

// setFlushes sets and checks the reconciler's fields of cfg (FlushInterval,
// FlushTimeout, MaxBatch, FailAfter) and its Policy, with their defaults.
func (s *Shared) setFlushes(cfg *SharedConfig) error {
	s.interval = cmp0(cfg.FlushInterval, DefaultFlushInterval)
	s.timeout = cmp0(cfg.FlushTimeout, DefaultFlushTimeout)
	if s.interval < time.Millisecond || s.interval > time.Minute {
		return badConfig("flush interval %v outside [1ms, 1m]", s.interval)
	}
	if s.timeout < time.Millisecond || s.timeout > time.Minute {
		return badConfig("flush timeout %v outside [1ms, 1m]", s.timeout)
	}
	s.maxBatch = cmp0(cfg.MaxBatch, DefaultMaxBatch)
	if s.maxBatch < 1 || s.maxBatch > 1<<20 {
		return badConfig("max batch %d outside [1, %d]", s.maxBatch, 1<<20)
	}
	s.failMax = cmp0(cfg.FailAfter, DefaultFailAfter)
	if s.failMax < 1 || s.failMax > 1000 {
		return badConfig("fail after %d outside [1, 1000]", s.failMax)
	}
	if cfg.Policy < FallbackLocal || cfg.Policy > FailClosed {
		return badConfig("unknown failure policy %d", int(cfg.Policy))
	}
	s.policy = cfg.Policy
	s.alg = cfg.Algorithm
	return nil
}

// setFallback sets and checks the fallback limits of cfg (FallbackLimit or
// FallbackLimits), which s.alg bounds.
func (s *Shared) setFallback(cfg *SharedConfig) error {
	rates := max(1, len(cfg.Rates))
	switch {
	case cfg.FallbackLimit < 0 || cfg.FallbackLimit > s.maxLimit():
		return badConfig("fallback limit %d outside [0, %d]", cfg.FallbackLimit, s.maxLimit())
	case cfg.FallbackLimit > 0 && cfg.FallbackLimits != nil:
		return badConfig("both FallbackLimit and FallbackLimits set")
	case cfg.FallbackLimit > 0 && rates > 1:
		return badConfig("FallbackLimit set for %d rates: set FallbackLimits", rates)
	case cfg.FallbackLimit > 0:
		s.fbLimits = []int{cfg.FallbackLimit}
	case cfg.FallbackLimits != nil:
		if len(cfg.FallbackLimits) != rates {
			return badConfig("%d fallback limits for %d rates", len(cfg.FallbackLimits), rates)
		}
		for _, l := range cfg.FallbackLimits {
			if l < 1 || l > s.maxLimit() {
				return badConfig("fallback limit %d outside [1, %d]", l, s.maxLimit())
			}
		}
		s.fbLimits = slices.Clone(cfg.FallbackLimits)
	}
	return nil
}

// checkWindows checks that the windows of several rates are whole
// microseconds.
func checkWindows(rates []shardlimit.Rate) error {
	if len(rates) > 1 {
		// The Redis keys of a rate name its window in microseconds.
		for _, r := range rates {
			if r.Window%time.Microsecond != 0 {
				return badConfig("window %v of several rates is not a whole number of microseconds", r.Window)
			}
		}
	}
	return nil
}

// setWatch checks the eviction check's period (zero: the default;
// negative: never).
func (s *Shared) setWatch(check time.Duration) error {
	every := cmp0(check, DefaultEvictionCheck)
	if every > time.Hour || every >= 0 && every < time.Millisecond {
		return badConfig("eviction check %v outside [1ms, 1h]", every)
	}
	s.evictEvery = max(every, 0)
	return nil
}

// setLocal builds the local limiter of cfg, with the sync state, and sets
// the fields read from its full configuration.
func (s *Shared) setLocal(cfg shardlimit.Config) error {
	tab, err := core.NewSynced(toCore(cfg))
	if err != nil {
		return err
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
	return nil
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

// Config returns the configuration of the local limiter.
func (s *Shared) Config() shardlimit.Config {
	return fromCore(s.core.Config())
}
