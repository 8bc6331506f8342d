package shardlimit

import (
	"context"
	"time"

	"github.com/shardlimit/shardlimit/internal/core"
)

// Sentinel errors. Every error returned by this package wraps one of them, so
// callers test with errors.Is.
var (
	// ErrInvalidConfig reports a Config field out of range, a limit below 0
	// or above MaxLimit, or a window out of [1ns, MaxWindow].
	ErrInvalidConfig = core.ErrInvalidConfig
	// ErrInvalidCost reports a negative cost n.
	ErrInvalidCost = core.ErrInvalidCost
	// ErrInvalidKey reports an empty key or one longer than Config.MaxKeyBytes.
	ErrInvalidKey = core.ErrInvalidKey
	// ErrTooManyKeys reports that a new key could not be stored because the
	// table holds Config.MaxKeys keys and none could be evicted under the
	// configured FullPolicy.
	ErrTooManyKeys = core.ErrTooManyKeys
	// ErrClosed reports a call on a limiter after Close.
	ErrClosed = core.ErrClosed
	// ErrInvalidTime reports an instant before the Unix epoch (the zero
	// time.Time included) or after the year 2222.
	ErrInvalidTime = core.ErrInvalidTime
)

// Limits of the configuration. They keep every product of a limit, a cost and
// a window in nanoseconds inside 128-bit intermediates and every instant
// inside int64 nanoseconds.
const (
	// MaxLimit is the largest limit (requests or cost units per window),
	// 1,073,741,823.
	MaxLimit = core.MaxLimit
	// MaxSlidingLogLimit is the largest limit of a SlidingLog key: its ring
	// buffer holds one 4-byte timestamp per admitted unit, 64 MiB at most.
	MaxSlidingLogLimit = core.MaxSlidingLogLimit
	// MaxWindow is the longest window: ten years of 365 days.
	MaxWindow = core.MaxWindow
	// MaxKeyBytesLimit is the largest value Config.MaxKeyBytes accepts, in
	// bytes: 65,535.
	MaxKeyBytesLimit = core.MaxKeyBytesLimit
	// MinJanitorInterval is the shortest Config.JanitorInterval: each
	// sweep visits every key, so a shorter one would keep a processor busy.
	MinJanitorInterval = core.MinJanitorInterval
	// MaxShards is the largest Config.Shards, 65,536 (a shard count is a
	// power of two).
	MaxShards = core.MaxShards
	// MaxBuckets is the largest Config.Buckets of a sliding window
	// counter, 65,536.
	MaxBuckets = core.MaxBuckets
	// MaxRates is the most rates (limit and window pairs) one limiter
	// holds per key (Config.Rates).
	MaxRates = core.MaxRates
)

// Never is Result.RetryAfter when no wait can make the request succeed: the
// key's limit is 0 (a ban) or the cost n exceeds the limit. HTTP middleware
// omits Retry-After for it.
const Never = core.Never

// Algorithm names one of the four rate-limiting algorithms. Its zero value is
// not a valid algorithm: New requires Config.Algorithm to be set.
type Algorithm int

// The algorithms. See the README for accuracy, memory and cost side by side.
const (
	// FixedWindow counts units per window aligned to Unix time: window k is
	// [k*W, (k+1)*W). Cheapest (24 bytes of state per key) but admits up to
	// twice the limit across a window boundary.
	FixedWindow Algorithm = iota + 1
	// SlidingLog keeps the timestamp of every admitted unit of the last
	// window in a ring buffer of capacity limit: exact, never more than
	// limit in any window of length W, at 4 bytes per admitted unit.
	SlidingLog
	// SlidingCounter splits the window into Config.Buckets sub-windows and
	// weights the oldest one by its remaining overlap with the window (the
	// approach Cloudflare described in 2017, generalised to n buckets).
	SlidingCounter
	// GCRA is the generic cell rate algorithm (ATM Forum TM 4.0, as in
	// go-redis/redis_rate and throttled): a token bucket of capacity limit
	// refilled at limit per window, O(1) state per key.
	GCRA
)

// String returns the algorithm's name as used in rule files:
// "fixed_window", "sliding_log", "sliding_counter" or "gcra".
func (a Algorithm) String() string { return core.Algorithm(a).String() }

// ParseAlgorithm returns the Algorithm named s ("fixed_window",
// "sliding_log", "sliding_counter" or "gcra"; "fixed", "log", "counter" and
// "token_bucket" are accepted as aliases). It returns an error wrapping
// ErrInvalidConfig for any other string.
func ParseAlgorithm(s string) (Algorithm, error) {
	a, err := core.ParseAlgorithm(s)
	return Algorithm(a), err
}

// MarshalText implements encoding.TextMarshaler with the names of String.
func (a Algorithm) MarshalText() ([]byte, error) { return core.Algorithm(a).MarshalText() }

// UnmarshalText implements encoding.TextUnmarshaler with ParseAlgorithm.
func (a *Algorithm) UnmarshalText(b []byte) error {
	return (*core.Algorithm)(a).UnmarshalText(b)
}

// FullPolicy says what a limiter does with a new key when it already holds
// Config.MaxKeys keys. Either way it first evicts a key whose state equals
// a fresh key's (an idle key), if one is among the 16 keys it looks at:
// each shard keeps a hand that walks its table, passing 16 stored keys per
// new key that finds the shard full, so the work per new key is bounded
// and every stored key is looked at about once per MaxKeys/16 new keys.
// A key is judged idle at the new key's instant, but no later than the
// limiter's Clock reads (so one request's far-future instant cannot make
// busy keys look idle): with a Clock that stands behind the instants you
// pass (a ManualClock not advanced), no key looks idle.
type FullPolicy int

const (
	// RejectNewKeys denies a new key (Result.Err wraps ErrTooManyKeys) while
	// the table is full and none of the 16 keys looked at is idle, so no
	// stored client ever loses its count. An idle key elsewhere is found by
	// a later new key (or by the janitor). An attacker flooding distinct
	// keys can deny service to new clients until the janitor frees room.
	RejectNewKeys FullPolicy = iota
	// EvictLeastRecent evicts, to make room, the least recently used of the
	// 16 keys looked at (an approximate LRU, as Redis's maxmemory-policy
	// allkeys-lru samples keys). Keys with their own limit (SetLimit) are
	// never evicted.
	// An evicted key that returns starts fresh, so a flood of distinct keys
	// can hand some clients a fresh budget early.
	EvictLeastRecent
)

// Rate is one limit over one window: at most Limit requests (cost units)
// in each Window. Config.Rates gives a limiter several.
type Rate struct {
	Limit  int           // requests (cost units) per window, as Config.Limit
	Window time.Duration // as Config.Window
}

// Config configures a limiter. The zero value is not usable: Window (with
// Limit) or Rates is required. Construction validates every field and
// returns an error wrapping ErrInvalidConfig for any value out of range.
type Config struct {
	// Algorithm selects the algorithm for New; the NewFixedWindow,
	// NewSlidingLog, NewSlidingCounter and NewGCRA constructors ignore it.
	Algorithm Algorithm

	// Limit is the default number of requests (cost units) admitted per
	// window for keys without a limit of their own, in [0, MaxLimit]
	// ([0, MaxSlidingLogLimit] for SlidingLog). 0 blocks every key. Leave it
	// and Window zero when Rates is set.
	Limit int

	// Window is the period the limit applies to, in [1ns, MaxWindow].
	// Windows and buckets are aligned to Unix time, so all nodes agree.
	Window time.Duration

	// Rates, if set, gives every key several limits, each over a window of
	// its own (say 3 per second and 100 per hour, so that a client can
	// neither spend an hour's quota in a second nor exceed it at a steady
	// pace): a request is admitted only if every rate admits it, and then
	// consumes from all of them; a request any rate denies consumes from
	// none. One record and one lock per key hold them all, so this is exact
	// under any concurrency. At most MaxRates rates, each window at most
	// once, each limit and window in the ranges of Limit and Window;
	// Limit and Window must then be zero. The Result reports the binding
	// rate, the one with the least remaining (Result.Window says which).
	Rates []Rate

	// Buckets is the number of sub-windows of SlidingCounter, in
	// [1, MaxBuckets]; each window must be a multiple of Buckets
	// nanoseconds. Default 10. The estimate weights the oldest bucket by
	// its overlap, so it errs by less than that bucket's units: about
	// Limit/Buckets for steady traffic, up to Limit-1 for bursts timed at
	// bucket edges (see NewSlidingCounter). Ignored by the other
	// algorithms.
	Buckets int

	// Shards is the number of lock stripes, a power of two in
	// [1, MaxShards]. Default: the next power of two of 8*GOMAXPROCS, at
	// least 16. Each shard takes about 750 bytes while it holds no key
	// (16: 12 KiB per limiter), so a program of thousands of limiters
	// that are each rarely busy (HTTP middleware rules,
	// httplimit.Options.Limiter) may want fewer.
	Shards int

	// MaxKeys caps the number of stored keys (0, the default, means no cap).
	// The cap is enforced per shard as ceil(MaxKeys/Shards) keys, so the
	// table holds at most Shards*ceil(MaxKeys/Shards) keys. See WhenFull.
	MaxKeys int

	// WhenFull says what to do with a new key when the table is full.
	// Default RejectNewKeys.
	WhenFull FullPolicy

	// MaxKeyBytes is the longest accepted key in bytes, in
	// [1, MaxKeyBytesLimit]. Longer keys are rejected with ErrInvalidKey.
	// Default 512.
	MaxKeyBytes int

	// JanitorInterval is how often the background janitor evicts idle keys
	// (keys whose state equals a fresh key's). 0 means the default: the
	// window (the longest of Rates), clamped to [1s, 1min]. A negative
	// value disables the janitor; call Sweep yourself then. A positive
	// value below MinJanitorInterval is an error. The janitor is one
	// goroutine per process, whatever the number of limiters: it starts
	// with the first limiter built with a janitor and ends when the last
	// one is closed, and sweeps each limiter at the limiter's own interval
	// and clock, one limiter and one shard at a time, so a limiter's sweep
	// may start late while another's runs. Only limiters that hold keys
	// are swept: a limiter's first key puts it on the janitor's schedule
	// (its first sweep one interval later) and a sweep that leaves it
	// empty takes it off, so limiters without keys (rules with no traffic)
	// cost the janitor nothing, however many there are.
	JanitorInterval time.Duration

	// Clock supplies the time for the short forms (Allow, AllowNow and
	// their byte forms) and for the janitor. Default DefaultClock(): the
	// system's monotonic clock, read at each call, so a decision is made at
	// its true instant under any load (see DefaultClock). The forms that
	// take now decide at that instant as given: pass time.Now() or your
	// server's request time (or, with a ManualClock, its readings). The
	// janitor judges keys idle at this clock's time, and a key it evicts at
	// instant T decides its next request no earlier than T: a clock
	// running ahead of your instants makes new keys stand still until
	// they catch up. SystemClock and DefaultClock read wall time at their
	// construction plus monotonic time since, the time time.Now() gives; a
	// ManualClock reads only what it is set to.
	Clock Clock
}

// Defaults of Config fields left zero.
const (
	DefaultBuckets     = 10  // Config.Buckets: sub-windows of a SlidingCounter
	DefaultMaxKeyBytes = 512 // Config.MaxKeyBytes, in bytes
)

// Result is one decision, returned by value. Durations are exact to the
// nanosecond (SlidingLog: to its timestamp resolution, see NewSlidingLog);
// HTTP headers round them up to whole seconds.
//
// Per key, time never goes back: a request whose now is earlier than the
// latest instant its key has seen is decided at that latest instant, and
// its durations are measured from its own now (so now+RetryAfter is when
// the same request fits).
type Result struct {
	// Allowed reports whether the request was admitted (and its cost
	// consumed). A cost of 0 is always allowed and consumes nothing.
	Allowed bool
	// Limit is the key's limit in requests (cost units) per Window.
	Limit int
	// Remaining is how many more units the key may consume now, after this
	// decision, in [0, Limit]. For SlidingCounter it is computed from the
	// weighted estimate, so it never promises more than will be admitted.
	Remaining int
	// ResetAfter is the time from now until the key's usage next drops:
	// FixedWindow: the end of the current window; SlidingLog: the expiry of
	// the oldest counted unit (Window if none); SlidingCounter: when the
	// oldest non-empty bucket stops counting; GCRA: when the bucket is full
	// again (0 if it is). Never negative.
	ResetAfter time.Duration
	// RetryAfter is, for a denied request, the time from now until the
	// earliest instant at which the same request would be admitted: always
	// positive, or Never if no wait can succeed (limit 0, or cost above the
	// limit). 0 when allowed.
	RetryAfter time.Duration
	// Window is the window of Limit, Remaining and ResetAfter: the
	// limiter's, or with several Config.Rates the binding one's, the rate
	// with the least remaining after this decision (ties: the longest window).
	// 0 when Err is set.
	Window time.Duration
	// Err is non-nil when the request could not be decided: an invalid cost
	// (ErrInvalidCost), an invalid key (ErrInvalidKey), an invalid instant
	// (ErrInvalidTime), a full table (ErrTooManyKeys) or a closed limiter
	// (ErrClosed). Allowed is false then and nothing was consumed.
	Err error
}

// Stats are a limiter's cumulative counters since construction. Stats()
// reads Allowed, Denied and Refused under each shard's lock in turn (they
// are plain counters, so the hot path pays no extra atomic operation) and
// Keys and Evicted without locks.
type Stats struct {
	Allowed uint64 // decisions that admitted a positive cost
	Denied  uint64 // decisions that denied a positive cost (errors excluded)
	Keys    int    // keys stored now
	Evicted uint64 // keys removed by the janitor, Sweep, a full table or Reset
	Refused uint64 // decisions the limiter had no memory for (Result.Err wraps ErrTooManyKeys): a new key in a full table, or a sliding log's ring that could not grow
}

// Limiter is implemented by all four algorithms, so switching algorithms is
// a one-word change (Config.Algorithm, or the constructor's name). All
// methods are safe for concurrent use.
type Limiter interface {
	// Allow reports whether one request for key may happen now (the
	// limiter's Clock), consuming it if so: AllowNow(key, 1).Allowed
	// without building the Result (see AllowAt and AllowNow for why these
	// are spelled apart). It returns false too when the request cannot be
	// decided (invalid key or instant, full table, closed limiter);
	// AllowN's Result.Err says which.
	Allow(key string) bool
	// AllowN decides whether n units for key may happen at now, consuming
	// them if so. n = 0 is a peek: always allowed, nothing consumed, no key
	// created. Every decision of n > 0, denied ones included (a cost above
	// the limit too), stores the key and makes now its latest instant.
	// Pass time.Now() or a time the caller already has, as the request's
	// time (see Config.Clock).
	AllowN(key string, now time.Time, n int) Result
	// AllowAt reports whether one request for key may happen at now,
	// consuming it if so: AllowN(key, now, 1).Allowed, spelled apart
	// because it is faster. It computes none of the Result's numbers and
	// copies no Result (64 bytes): BenchmarkAllowAt measures it against
	// AllowN(key, now, 1).Allowed, which runs about a fifth more
	// instructions (a third more for SlidingCounter). It returns false
	// too when the request cannot be decided; AllowN's Result.Err says
	// which.
	AllowAt(key string, now time.Time) bool
	// AllowNow is AllowN at the limiter's Clock: what a server without a
	// request time of its own calls for a Result. It is spelled apart
	// from AllowN(key, clock.Now(), n) because it is faster: with the
	// default clock it reads the time straight into the limiter's instant,
	// where clock.Now() builds a time.Time that AllowN converts back
	// (BenchmarkAllowNow: AllowN that way runs about a fifth more
	// instructions).
	AllowNow(key string, n int) Result
	// AllowBytes is Allow for a []byte key; it does not allocate for a key
	// that is already stored and never retains key.
	AllowBytes(key []byte) bool
	// AllowBytesN is AllowN for a []byte key; it does not allocate for a key
	// that is already stored and never retains key.
	AllowBytesN(key []byte, now time.Time, n int) Result
	// AllowBytesAt is AllowAt for a []byte key; it does not allocate for a
	// key that is already stored and never retains key
	// (BenchmarkAllowBytesAt measures it against AllowBytesN).
	AllowBytesAt(key []byte, now time.Time) bool
	// AllowBytesNow is AllowNow for a []byte key; it does not allocate for
	// a key that is already stored and never retains key
	// (BenchmarkAllowBytesNow measures it against AllowBytesN at
	// clock.Now()).
	AllowBytesNow(key []byte, n int) Result
	// Peek reports what AllowN(key, now, n) would decide, consuming nothing
	// and creating no key.
	Peek(key string, now time.Time, n int) Result
	// SetLimit gives key a limit of its own, in [0, MaxLimit] ([0,
	// MaxSlidingLogLimit] for SlidingLog; 0 blocks the key), kept until
	// ClearLimit and never evicted. The key's history is kept: usage counted
	// so far counts against the new limit (GCRA caps a key's debt at 20
	// years when a limit is lowered). It is SetLimits(key, limit). It
	// returns an error wrapping ErrInvalidConfig for a limit out of range,
	// ErrInvalidKey for an empty or too long key, ErrTooManyKeys if the key
	// is new and the table is full, or ErrClosed.
	SetLimit(key string, limit int) error
	// SetLimits gives key limits of its own, one per rate in the order of
	// Config.Rates (one limit for a limiter of one rate), all at once: a
	// client tier with its own numbers per window. It returns an error
	// wrapping ErrInvalidConfig if the count of limits is not the count of
	// rates; otherwise as SetLimit.
	SetLimits(key string, limits ...int) error
	// ClearLimit makes key use the default limits again (nothing for a key
	// not stored). It returns an error wrapping ErrInvalidKey for an empty
	// or too long key, ErrClosed after Close.
	ClearLimit(key string) error
	// SetDefaultLimit changes the limit of every key without its own. It
	// is SetDefaultLimits(limit).
	SetDefaultLimit(limit int) error
	// SetDefaultLimits changes the limits of every key without its own,
	// one per rate in the order of Config.Rates, each in the range of
	// SetLimit. It returns an error wrapping ErrInvalidConfig if the count
	// of limits is not the count of rates or a limit is out of range,
	// ErrClosed after Close.
	SetDefaultLimits(limits ...int) error
	// Reset forgets key's usage (not its own limits, if any, nor its
	// latest instant): its next request is decided as a new key's, at
	// that request's instant or the key's latest (up to the limiter's
	// Clock), whichever is later, so a request read before the Reset
	// cannot spend a window twice. A later Settle refund of a decision
	// made before the Reset gives nothing back (see Settle). It
	// returns ErrInvalidKey for an empty or too long key, ErrClosed after
	// Close.
	Reset(key string) error
	// Len returns the number of keys stored.
	Len() int
	// Stats returns the cumulative counters.
	Stats() Stats
	// Sweep evicts, one shard at a time, every key whose state at now equals
	// a fresh key's, and returns how many it evicted. The janitor calls it
	// with the limiter's Clock. A key whose latest instant is after now is
	// not idle. Every new key of a shard Sweep evicted from at now decides
	// its first request no earlier than now, so a now ahead of your
	// instants holds new keys back until they catch up.
	Sweep(now time.Time) int
	// Config returns the configuration in effect, defaults filled in.
	Config() Config
	// Settle settles a decision made for key at at (the now it was
	// decided with) to its final cost, in every rate of the key: delta > 0
	// charges delta more units, an overdraft taken even beyond the limit
	// (never refused) that the next decisions count; delta < 0 gives -delta
	// units back, never below zero. Use it to count a cost known only
	// after the response (tokens of an answer, bytes sent), or to count
	// only failed or only successful responses (charge 1 after, or refund
	// the 1 taken before). A charge counts at the key's latest instant,
	// which is never before the decision's; a charge whose at is after
	// it (a decision made elsewhere, such as a shared store's) first
	// moves the key's latest instant to at and counts there, never in a
	// window that has ended. A refund gives back units of
	// the decision's own window (FixedWindow, while it is the current
	// one), bucket (SlidingCounter), stamp (SlidingLog: the stamps of at;
	// with at before the key's latest instant then, the decision's stamps
	// are later and fewer are found) or GCRA's theoretical arrival time
	// (moved back by the units less the time from at to the key's latest
	// instant or its latest reservation's, whichever is later: the units
	// drained since and the places of the decisions queued behind stay
	// taken, as x/time/rate's restoreTokens does with its lastEvent): as
	// far as the decisions made since allow, never units newer than the
	// decision's own, so a refund never frees room that a window does not
	// have; a unit whose window or bucket has passed is not given back.
	// Pass the instant the decision was made with (an earlier one gives
	// back less; a later one is not the decision's), and refund in all at
	// most the units the decision holds: the limiter keeps no record per
	// decision, so a larger refund gives back other decisions' units of
	// the same window, bucket or stamp, which they still use. A SlidingLog key holds at most twice
	// its limit of stamps: a charge beyond that moves every stamp of the
	// key to just after its newest, so each counts at least as long as
	// before, and the units beyond are kept as a count beside them that
	// expires with them, in every rate, whatever the limit becomes (a
	// raised limit still counts them; the count takes an entry in a map
	// of the key's shard, the one allocation such a Settle may make, as
	// exactness comes before speed here); no refund or cancel gives any of
	// them back any more (less, never more). Only a key whose shard has
	// no ring memory left for a single stamp loses a charge. A settle under a ban (a limit of 0) is
	// kept, and counts once the ban is lifted. A refund for a key not stored does nothing; a charge
	// stores it. A Reset, or the eviction of a key still in use from a
	// full table (EvictLeastRecent), forgets its decisions' units: a
	// refund of a decision made no later than that key's latest instant
	// (or its latest reservation's, or the end of the window or bucket
	// that one lies in) then gives nothing back, for every key of its shard (the rule is
	// kept per shard, so it costs no memory per key; it gives back less,
	// never units admitted after the Reset). It returns an error wrapping ErrInvalidKey, ErrInvalidCost
	// (|delta| above MaxLimit), ErrInvalidTime, ErrTooManyKeys (a charge
	// for a new key in a full table) or ErrClosed. It allocates nothing
	// but its errors and costs at most AllowN (BenchmarkSettle).
	Settle(key string, at time.Time, delta int) error
	// ReserveN reserves n units of key at now and returns the
	// Reservation by value (no allocation): the units are consumed at
	// once if the key admits them (Delay 0), else at the first instant at
	// which every rate admits them, which Delay measures from now; a
	// Reservation holds them until then, and CancelAt gives them back.
	// Every decision counts reserved units: no window ever holds more
	// than its limit with them, and a key's reservations are served in
	// the order made (FixedWindow and SlidingCounter deny every request
	// before a reservation's window or bucket, whose count they gave up
	// for it; GCRA queues every later request behind it; SlidingLog counts
	// the reserved stamps, and admits a later request that fits beside
	// them). Not OK: a cost above the limit or a limit of 0 (Err wraps
	// ErrExceedsLimit; Delay Never), for SlidingLog units free only more
	// than its longest window after the key's latest instant, or beyond
	// twice its limit of stamps (ErrNotHeld; Delay says when to try
	// again), or the errors of AllowN. n = 0 is OK at once. The model is
	// x/time/rate's Reservation (ReservationPortXTimeRate tests its cases
	// on GCRA); unlike it, a now behind the key's latest instant is decided
	// at the latest (see Result). ReserveN allocates nothing
	// (BenchmarkReserveN: about three times AllowN's cost).
	ReserveN(key string, now time.Time, n int) Reservation
	// WaitN blocks until n units of key are admitted at the limiter's
	// Clock, and returns nil; or returns at once an error wrapping
	// ErrExceedsLimit when no wait can admit them (cost above the limit,
	// limit 0), ErrWouldExceedDeadline when they would be free after
	// ctx's deadline, or AllowN's errors; or, when ctx is done while it
	// waits, an error wrapping ctx.Err() (the units are given back, as
	// CancelAt does); or, when the limiter is closed while it waits, an
	// error wrapping ErrClosed. It reserves the units (ReserveN) and sleeps on the
	// Clock (SleepUntil: a ManualClock's waiters wake when it is
	// advanced), so waiters on one key are admitted in the order they
	// called, a large cost is never overtaken by small ones, and no
	// goroutine exists per waiter but its caller (a SlidingLog waiter may
	// be overtaken by a later request that fits beside it; a waiter beyond
	// the SlidingLog's horizon sleeps until its units should be free and
	// reserves again). The context's deadline is compared with the Clock's
	// readings. A key that admits at once costs what AllowNow does: one
	// clock read and a decision without a Result (BenchmarkWait).
	WaitN(ctx context.Context, key string, n int) error
	// Wait is WaitN(ctx, key, 1).
	Wait(ctx context.Context, key string) error
	// Close takes the limiter off the janitor's schedule, waiting for a
	// sweep of its table in progress (not for another limiter's), and
	// stops the janitor's goroutine if no other limiter needs it. It is
	// idempotent and always returns nil; afterwards decisions return
	// ErrClosed and the janitor never touches the limiter again. Waits in
	// progress (WaitN) return an error wrapping ErrClosed at once.
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
	return nil, core.UnknownAlgorithm(core.Algorithm(cfg.Algorithm))
}
