package sync

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/core"
)

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

// maxJournalKeys bounds ExactConfig.JournalKeys.
const maxJournalKeys = 1 << 24

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
	// The goroutine is the client's: it reads INFO once for all the
	// client's limiters, at the shortest EvictionCheck among them and at
	// most once a second.
	// While Redis's evicted_keys grows the limiter is Degraded, with an
	// error wrapping ErrEvicting, and decides by Policy as during an
	// outage (see the package doc on eviction).
	EvictionCheck time.Duration

	// HealthInterval is the interval over which the limiter measures the
	// share of its decisions the failure policy made (see State), in
	// [1ms, 1h]; default DefaultHealthInterval (1s).
	HealthInterval time.Duration

	// JournalKeys caps the keys of the journal, in [1, 2^24]; default
	// DefaultJournalKeys (65,536). The journal records, per key, the units
	// this process was granted that still count (by Redis, and by the
	// Policy without Redis), coalesced to at most four entries a key (a
	// few hundred bytes), so that they reach Redis when it answers again
	// (see the package doc on outages). A key leaves it once its units no
	// longer count. When it is full of keys whose units still count, the
	// Policy denies new keys (a decision it would have admitted is denied,
	// as FailClosed would), and units Redis grants to new keys are not
	// recorded (counted in ExactStats.JournalFull): if the store then
	// loses its state, those units are not restored. JournalKeys also
	// caps the keys whose state this process saw alive in Redis and
	// remembers the birth of (about 225 bytes a key of 13 bytes, 15 MB
	// at the default; see the package doc on eviction): a key past it is
	// not remembered, and a loss of its state is proved by the journal or
	// seen by the eviction check only.
	JournalKeys int

	// DenyCacheKeys caps the keys of the deny cache, in [0, 2^20]; default
	// DefaultDenyCacheKeys (1,024); negative: no cache. A key the store
	// denied is answered in-process, with no round trip, until the
	// denial's RetryAfter has passed (see Exact on the deny cache). Each
	// key takes 64 bytes and holds its key string, allocated at the first denial of its
	// stripe.
	DenyCacheKeys int

	// OnStateChange, if set, is called on every change between Healthy and
	// Degraded, in order, from the client's background goroutine (never
	// from a deciding goroutine). It must not block for long and must not
	// call Close or Shutdown of any limiter.
	OnStateChange func(StateChange)
}

// ratesOf returns cfg's rates: Rates, or the one of Limit and Window.
func ratesOf(cfg shardlimit.Config) []shardlimit.Rate {
	if len(cfg.Rates) > 0 {
		return cfg.Rates
	}
	return []shardlimit.Rate{{Limit: cfg.Limit, Window: cfg.Window}}
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
	e.defaults.Store(newDefaultLimits(defaults))
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

// scriptFor returns the decision script of algorithm alg, or an error
// wrapping shardlimit.ErrInvalidConfig if alg has no exact mode.
func scriptFor(alg shardlimit.Algorithm) (*redis.Script, error) {
	switch alg {
	case shardlimit.FixedWindow:
		return fixedScript, nil
	case shardlimit.SlidingCounter:
		return counterScript, nil
	case shardlimit.GCRA:
		return gcraScript, nil
	case shardlimit.SlidingLog:
		return nil, fmt.Errorf("%w: the sliding log has no exact mode; use SlidingCounter", shardlimit.ErrInvalidConfig)
	}
	return nil, core.UnknownAlgorithm(core.Algorithm(alg))
}

// configureLimiter validates cfg.Config and applies it with its defaults
// filled in: e.cfg, the fallback (cfg.Fallback, or one built here under
// FallbackLocal), the rates and the default limits. It requires
// e.configure done (the policy).
func (e *Exact) configureLimiter(cfg *ExactConfig) error {
	full, err := e.fillConfig(cfg)
	if err != nil {
		return err
	}
	e.cfg = full
	if err := e.setRates(); err != nil {
		e.closeFallback()
		return err
	}
	if e.policy == FallbackLocal && cfg.Fallback != nil {
		return e.checkFallback(cfg.Fallback.Config())
	}
	return nil
}

// fillConfig validates cfg.Config and returns it with its defaults filled
// in, by building a limiter: the fallback, which it sets in e, or a
// throwaway one without a janitor.
func (e *Exact) fillConfig(cfg *ExactConfig) (shardlimit.Config, error) {
	if e.policy == FallbackLocal && cfg.Fallback == nil {
		fb, err := shardlimit.New(cfg.Config)
		if err != nil {
			return shardlimit.Config{}, err
		}
		e.fallback, e.ownFb = fb, true
		return fb.Config(), nil
	}
	probe := cfg.Config
	probe.JanitorInterval = -1
	tmp, err := shardlimit.New(probe)
	if err != nil {
		return shardlimit.Config{}, err
	}
	full := tmp.Config()
	full.JanitorInterval = cfg.JanitorInterval
	_ = tmp.Close()
	if e.policy == FallbackLocal {
		e.fallback = cfg.Fallback
	}
	return full, nil
}

// configure validates and applies the fields of cfg outside its Config.
func (e *Exact) configure(cfg *ExactConfig) error {
	e.prefix = cmp0(cfg.Prefix, DefaultPrefix)
	if err := checkPrefix(e.prefix); err != nil {
		return err
	}
	e.timeout = cmp0(cfg.Timeout, DefaultTimeout)
	if err := checkSpan("timeout", e.timeout, time.Millisecond, time.Minute, "[1ms, 1m]"); err != nil {
		return err
	}
	e.degrade = cmp0(cfg.DegradeAfter, DefaultDegradeAfter)
	if err := checkSpan("degrade after", e.degrade, time.Nanosecond, time.Minute, "[1ns, 1m]"); err != nil {
		return err
	}
	if cfg.Policy < FallbackLocal || cfg.Policy > FailClosed {
		return fmt.Errorf("%w: unknown failure policy %d", shardlimit.ErrInvalidConfig, int(cfg.Policy))
	}
	e.policy = cfg.Policy
	e.onChange = cfg.OnStateChange
	return e.configureProbe(cfg)
}

// configureProbe validates and applies the fields of cfg that pace the
// background goroutine: the reconnect probe and the eviction check.
func (e *Exact) configureProbe(cfg *ExactConfig) error {
	e.probeMin = cmp0(cfg.ProbeInterval, DefaultProbeInterval)
	if err := checkSpan("probe interval", e.probeMin, time.Millisecond, time.Hour, "[1ms, 1h]"); err != nil {
		return err
	}
	e.probeMax = cmp0(cfg.MaxProbeInterval, max(DefaultMaxProbeInterval, e.probeMin))
	if err := checkSpan("max probe interval", e.probeMax, e.probeMin, time.Hour, fmt.Sprintf("[%v, 1h]", e.probeMin)); err != nil {
		return err
	}
	every := cmp0(cfg.EvictionCheck, DefaultEvictionCheck)
	if every >= 0 { // negative: never
		if err := checkSpan("eviction check", every, time.Millisecond, time.Hour, "[1ms, 1h]"); err != nil {
			return err
		}
	}
	e.evictEvery = max(every, 0)
	share, err := newShareWatch(cfg.HealthInterval)
	if err != nil {
		return err
	}
	e.share = share
	return nil
}

// checkSpan returns an error wrapping shardlimit.ErrInvalidConfig unless d
// is in [lo, hi]; span spells that range in the message, field names d.
func checkSpan(field string, d, lo, hi time.Duration, span string) error {
	if d < lo || d > hi {
		return fmt.Errorf("%w: %s %v outside %s", shardlimit.ErrInvalidConfig, field, d, span)
	}
	return nil
}
