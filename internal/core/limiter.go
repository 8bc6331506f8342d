package core

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"time"
)

// Sentinel errors, exported and documented by package shardlimit under
// the same names (the same values, so errors.Is finds them either way).
var (
	ErrInvalidConfig = errors.New("shardlimit: invalid config")
	ErrInvalidCost   = errors.New("shardlimit: invalid cost")
	ErrInvalidKey    = errors.New("shardlimit: invalid key")
	ErrTooManyKeys   = errors.New("shardlimit: too many keys")
	ErrClosed        = errors.New("shardlimit: limiter closed")
	ErrInvalidTime   = errors.New("shardlimit: invalid time")
)

// Limits of the configuration, documented where package shardlimit
// exports them under the same names. They keep every product of a limit,
// a cost and a window in nanoseconds inside 128-bit intermediates and every
// instant inside int64 nanoseconds.
const (
	MaxLimit           = 1<<30 - 1
	MaxSlidingLogLimit = 1 << 24 // a ring of 4-byte stamps: 64 MiB at most
	MaxWindow          = 10 * 365 * 24 * time.Hour
	MaxKeyBytesLimit   = 1<<16 - 1
	MinJanitorInterval = time.Millisecond
	MaxShards          = 1 << 16
	MaxBuckets         = 1 << 16
	MaxRates           = 4
)

// Never is Result.RetryAfter when no wait can make the request succeed
// (package shardlimit's Never).
const Never = time.Duration(math.MaxInt64)

// Algorithm names one of the four rate-limiting algorithms, as package
// shardlimit's Algorithm (documented there) of the same value.
type Algorithm int

// The algorithms.
const (
	FixedWindow Algorithm = iota + 1
	SlidingLog
	SlidingCounter
	GCRA
)

// String returns the algorithm's name as used in rule files:
// "fixed_window", "sliding_log", "sliding_counter" or "gcra".
func (a Algorithm) String() string {
	switch a {
	case FixedWindow:
		return "fixed_window"
	case SlidingLog:
		return "sliding_log"
	case SlidingCounter:
		return "sliding_counter"
	case GCRA:
		return "gcra"
	}
	return fmt.Sprintf("Algorithm(%d)", int(a))
}

// ParseAlgorithm returns the Algorithm named s ("fixed_window",
// "sliding_log", "sliding_counter" or "gcra"; "fixed", "log", "counter" and
// "token_bucket" are accepted as aliases). It returns an error wrapping
// ErrInvalidConfig for any other string.
func ParseAlgorithm(s string) (Algorithm, error) {
	switch s {
	case "fixed_window", "fixed":
		return FixedWindow, nil
	case "sliding_log", "log":
		return SlidingLog, nil
	case "sliding_counter", "counter":
		return SlidingCounter, nil
	case "gcra", "token_bucket":
		return GCRA, nil
	}
	return 0, fmt.Errorf("%w: unknown algorithm %q (%s)", ErrInvalidConfig, s, algorithmNames)
}

// algorithmNames lists the names ParseAlgorithm accepts, for its error.
const algorithmNames = `want "fixed_window", "sliding_log", "sliding_counter" or "gcra"`

// UnknownAlgorithm returns the error for a Config whose Algorithm is none
// of the four: it wraps ErrInvalidConfig and, for the zero value, says
// that the field was left unset.
func UnknownAlgorithm(a Algorithm) error {
	if a == 0 {
		return fmt.Errorf("%w: unknown algorithm 0: Config.Algorithm is not set; choose FixedWindow, SlidingLog, SlidingCounter or GCRA", ErrInvalidConfig)
	}
	return fmt.Errorf("%w: unknown algorithm %d (FixedWindow, SlidingLog, SlidingCounter or GCRA)", ErrInvalidConfig, int(a))
}

// MarshalText implements encoding.TextMarshaler with the names of String.
func (a Algorithm) MarshalText() ([]byte, error) {
	if a < FixedWindow || a > GCRA {
		return nil, fmt.Errorf("%w: unknown algorithm %d", ErrInvalidConfig, int(a))
	}
	return []byte(a.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseAlgorithm.
func (a *Algorithm) UnmarshalText(b []byte) error {
	v, err := ParseAlgorithm(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// FullPolicy says what a limiter does with a new key when it already holds
// Config.MaxKeys keys: package shardlimit's FullPolicy (documented there),
// carried out by table.makeRoom.
type FullPolicy int

// The full policies, as package shardlimit's.
const (
	RejectNewKeys FullPolicy = iota
	EvictLeastRecent
)

// Rate is one limit over one window: at most Limit requests (cost units)
// in each Window. Config.Rates gives a limiter several.
type Rate struct {
	Limit  int           // requests (cost units) per window, as Config.Limit
	Window time.Duration // as Config.Window
}

// Config configures a limiter: package shardlimit's Config, field for
// field, where each field's range and default are documented; the root
// converts one to the other at construction. withDefaults validates it.
type Config struct {
	Algorithm       Algorithm
	Limit           int           // per Window, for keys without their own
	Window          time.Duration // Limit's window
	Rates           []Rate        // several rates instead of Limit and Window
	Buckets         int           // SlidingCounter's sub-windows, default 10
	Shards          int           // lock stripes, a power of two
	MaxKeys         int           // cap on stored keys, 0 for none
	WhenFull        FullPolicy    // what a full table does with a new key
	MaxKeyBytes     int           // longest key, default 512
	JanitorInterval time.Duration // 0: the default, < 0: no janitor
	Clock           Clock         // default DefaultClock()
}

// Defaults of Config fields left zero.
const (
	DefaultBuckets     = 10
	DefaultMaxKeyBytes = 512
)

// withDefaults returns cfg with zero fields replaced by their defaults and
// validates the result.
func (cfg Config) withDefaults(alg Algorithm) (Config, error) {
	cfg.Algorithm = alg
	if alg < FixedWindow || alg > GCRA {
		return cfg, UnknownAlgorithm(alg)
	}
	if cfg.Buckets == 0 {
		cfg.Buckets = DefaultBuckets
	}
	if alg == SlidingCounter && (cfg.Buckets < 1 || cfg.Buckets > MaxBuckets) {
		return cfg, fmt.Errorf("%w: buckets %d outside [1, %d]", ErrInvalidConfig, cfg.Buckets, MaxBuckets)
	}
	if err := cfg.checkRates(); err != nil {
		return cfg, err
	}
	if err := cfg.tableDefaults(); err != nil {
		return cfg, err
	}
	if err := cfg.janitorDefaults(); err != nil {
		return cfg, err
	}
	if cfg.Clock == nil {
		cfg.Clock = DefaultClock()
	}
	return cfg, nil
}

// checkRates validates the limits and windows of cfg (Rates, or Limit and
// Window) for cfg.Algorithm and cfg.Buckets, and clones Rates.
func (cfg *Config) checkRates() error {
	if len(cfg.Rates) > 0 {
		if cfg.Limit != 0 || cfg.Window != 0 {
			return fmt.Errorf("%w: both Rates and Limit or Window set", ErrInvalidConfig)
		}
		if len(cfg.Rates) > MaxRates {
			return fmt.Errorf("%w: %d rates, at most %d", ErrInvalidConfig, len(cfg.Rates), MaxRates)
		}
		cfg.Rates = slices.Clone(cfg.Rates)
	}
	alg := cfg.Algorithm
	for i, r := range cfg.rates() {
		if err := checkLimit(alg, r.Limit); err != nil {
			return err
		}
		if r.Window <= 0 || r.Window > MaxWindow {
			return fmt.Errorf("%w: window %v outside [1ns, %v]", ErrInvalidConfig, r.Window, MaxWindow)
		}
		if alg == SlidingCounter && int64(r.Window)%int64(cfg.Buckets) != 0 {
			return fmt.Errorf("%w: window %v is not a multiple of %d buckets in nanoseconds", ErrInvalidConfig, r.Window, cfg.Buckets)
		}
		for _, o := range cfg.Rates[:i] {
			if o.Window == r.Window {
				return fmt.Errorf("%w: window %v given twice in Rates", ErrInvalidConfig, r.Window)
			}
		}
	}
	return nil
}

// tableDefaults fills in and validates the fields of cfg that shape the
// key table: Shards, MaxKeys, WhenFull and MaxKeyBytes.
func (cfg *Config) tableDefaults() error {
	if cfg.Shards == 0 {
		cfg.Shards = 1 << bits.Len(uint(8*runtime.GOMAXPROCS(0)-1))
		cfg.Shards = max(cfg.Shards, 16)
		cfg.Shards = min(cfg.Shards, MaxShards)
	}
	if cfg.Shards < 1 || cfg.Shards > MaxShards || cfg.Shards&(cfg.Shards-1) != 0 {
		return fmt.Errorf("%w: shards %d is not a power of two in [1, %d]", ErrInvalidConfig, cfg.Shards, MaxShards)
	}
	if cfg.MaxKeys < 0 {
		return fmt.Errorf("%w: max keys %d is negative", ErrInvalidConfig, cfg.MaxKeys)
	}
	if cfg.WhenFull != RejectNewKeys && cfg.WhenFull != EvictLeastRecent {
		return fmt.Errorf("%w: unknown full policy %d", ErrInvalidConfig, int(cfg.WhenFull))
	}
	if cfg.MaxKeyBytes == 0 {
		cfg.MaxKeyBytes = DefaultMaxKeyBytes
	}
	if cfg.MaxKeyBytes < 1 || cfg.MaxKeyBytes > MaxKeyBytesLimit {
		return fmt.Errorf("%w: max key bytes %d outside [1, %d]", ErrInvalidConfig, cfg.MaxKeyBytes, MaxKeyBytesLimit)
	}
	return nil
}

// janitorDefaults fills in and validates cfg.JanitorInterval.
func (cfg *Config) janitorDefaults() error {
	if cfg.JanitorInterval == 0 {
		longest := time.Duration(0) // a key is idle once every window passed
		for _, r := range cfg.rates() {
			longest = max(longest, r.Window)
		}
		cfg.JanitorInterval = min(max(longest, time.Second), time.Minute)
	}
	if cfg.JanitorInterval > 0 && cfg.JanitorInterval < MinJanitorInterval {
		return fmt.Errorf("%w: janitor interval %v below %v", ErrInvalidConfig, cfg.JanitorInterval, MinJanitorInterval)
	}
	return nil
}

// rates returns cfg's rates: Rates, or the one of Limit and Window.
func (cfg Config) rates() []Rate {
	if len(cfg.Rates) > 0 {
		return cfg.Rates
	}
	return []Rate{{cfg.Limit, cfg.Window}}
}

// rateSet is a limiter's rates as its keys keep them, longest window first
// (the sliding log's ring covers the longest).
type rateSet struct {
	n      int
	window [MaxRates]int64
	order  [MaxRates]int // order[k]: rate k's index in Config.rates()
}

func newRateSet(cfg Config) rateSet {
	rs := cfg.rates()
	idx := make([]int, len(rs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(rs[b].Window, rs[a].Window) })
	set := rateSet{n: len(rs)}
	for k, i := range idx {
		set.window[k], set.order[k] = int64(rs[i].Window), i
	}
	return set
}

// checkLimit reports whether limit is a valid limit for alg.
func checkLimit(alg Algorithm, limit int) error {
	hi := MaxLimit
	if alg == SlidingLog {
		hi = MaxSlidingLogLimit
	}
	if limit < 0 || limit > hi {
		return fmt.Errorf("%w: limit %d outside [0, %d]", ErrInvalidConfig, limit, hi)
	}
	return nil
}

// Result is one decision, returned by value: package shardlimit's Result,
// field for field (the root converts one to the other for free), where its
// fields are documented.
type Result struct {
	Allowed    bool
	Limit      int
	Remaining  int
	ResetAfter time.Duration
	RetryAfter time.Duration
	Window     time.Duration
	Err        error
}

// Stats are a limiter's cumulative counters since construction: package
// shardlimit's Stats, field for field. Stats() reads Allowed, Denied and
// Refused under each shard's lock in turn and Keys and Evicted without
// locks.
type Stats struct {
	Allowed uint64
	Denied  uint64
	Keys    int
	Evicted uint64
	Refused uint64
}

// Limiter is what every limiter of this package implements: package
// shardlimit's Limiter with this package's Result, Stats and Config, where
// each method is documented. All methods are safe for concurrent use.
type Limiter interface {
	Allow(key string) bool
	AllowAt(key string, now time.Time) bool
	AllowN(key string, now time.Time, n int) Result
	AllowNow(key string, n int) Result
	AllowBytes(key []byte) bool
	AllowBytesAt(key []byte, now time.Time) bool
	AllowBytesN(key []byte, now time.Time, n int) Result
	AllowBytesNow(key []byte, n int) Result
	Peek(key string, now time.Time, n int) Result
	Settle(key string, at time.Time, delta int) error
	Reserve(key string, now time.Time, n int, maxWait time.Duration) Reserved
	SetLimit(key string, limit int) error
	SetLimits(key string, limits ...int) error
	ClearLimit(key string) error
	SetDefaultLimit(limit int) error
	SetDefaultLimits(limits ...int) error
	Reset(key string) error
	Len() int
	Stats() Stats
	Sweep(now time.Time) int
	Config() Config
	Close() error
}

// New returns a limiter running cfg.Algorithm. It returns an error wrapping
// ErrInvalidConfig when cfg is invalid. Unless cfg.JanitorInterval < 0, the
// limiter joins the process's janitor, one goroutine shared by every limiter
// of the process (started by the first); call Close to leave it.
func New(cfg Config) (Limiter, error) {
	switch cfg.Algorithm {
	case FixedWindow:
		return NewFixedWindow(cfg)
	case SlidingLog:
		return NewSlidingLog(cfg)
	case SlidingCounter:
		return NewSlidingCounter(cfg)
	case GCRA:
		return NewGCRA(cfg)
	}
	return nil, UnknownAlgorithm(cfg.Algorithm)
}

// build returns a new limiter of type L, set up by its Init (whose errors
// it returns).
func build[L any, P interface {
	*L
	Limiter
	Init(cfg Config) error
}](cfg Config) (Limiter, error) {
	l := P(new(L))
	if err := l.Init(cfg); err != nil {
		return nil, err
	}
	return l, nil
}
