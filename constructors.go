package shardlimit

// The constructors: each converts the Config to internal/core's and sets up
// one algorithm's limiter type (decisions_gen.go), which holds core's in an
// unexported field. Their methods are written from one template:

//go:generate go run ./internal/gen/decisions -pkg shardlimit
//go:generate go run ./internal/gen/configconv -pkg shardlimit

// NewFixedWindow returns a fixed window limiter: each key may consume
// cfg.Limit units in each window [k*W, (k+1)*W) of Unix time (for each of
// cfg.Rates). It is the cheapest algorithm (24 bytes of state per key and
// rate) and the least accurate: a client can consume the limit at the end
// of one window and again at the start of the next, up to twice the limit
// within one window's length.
//
// It returns an error wrapping ErrInvalidConfig if cfg is invalid. The
// limiter is safe for concurrent use; Close ends its sweeps by the janitor.
func NewFixedWindow(cfg Config) (Limiter, error) {
	l := &fixedLimiter{}
	if err := l.c.Init(toCore(cfg)); err != nil {
		return nil, err
	}
	return l, nil
}

// NewSlidingLog returns a sliding window log limiter: exact, it admits at
// most cfg.Limit units in any interval of length cfg.Window (a unit admitted
// at s counts for decisions at t with s <= t < s+W), for each of cfg.Rates.
// Each key keeps a ring buffer of 4-byte timestamps, grown on demand up to
// the limit of the longest window (with several rates, that one ring
// serves every window).
//
// Timestamps have a resolution of the smallest power of ten nanoseconds
// that is at least W/2^30 for the longest window: 1 ns for windows up to
// about 1 s, 100 ns for a minute, 10 µs for an hour, 100 ms for a year.
// They are rounded up, so a unit counts at least W and at most one
// resolution step longer: the log never admits early. RetryAfter is exact:
// the same request made RetryAfter after now is admitted, and one made a
// nanosecond sooner is not. It includes the part of a step a stamp was
// rounded up by, so for instants between two steps a wait of whole seconds
// can read as the next second in a Retry-After header. ResetAfter is
// measured from now rounded up to the resolution, so a unit admitted now
// reports a reset of exactly W.
//
// It returns an error wrapping ErrInvalidConfig if cfg is invalid (each
// limit may be at most MaxSlidingLogLimit). The limiter is safe for
// concurrent use; Close ends its sweeps by the janitor.
func NewSlidingLog(cfg Config) (Limiter, error) {
	l := &logLimiter{}
	if err := l.c.Init(toCore(cfg)); err != nil {
		return nil, err
	}
	return l, nil
}

// NewSlidingCounter returns a sliding window counter limiter with
// cfg.Buckets buckets per window (default 10): O(1) memory per key
// (cfg.Buckets+1 counters of 4 bytes per rate) and an estimate that errs
// by less than the straddling bucket's units: about limit/Buckets for
// steady traffic (bench/cmd/accuracy measures it), up to limit-1 for
// bursts timed at bucket edges. It is the algorithm Cloudflare described
// in 2017, generalised from 2 to n+1 buckets.
//
// It returns an error wrapping ErrInvalidConfig if cfg is invalid (each
// window must be a multiple of Buckets nanoseconds). The limiter is safe
// for concurrent use; Close ends its sweeps by the janitor.
func NewSlidingCounter(cfg Config) (Limiter, error) {
	l := &counterLimiter{}
	if err := l.c.Init(toCore(cfg)); err != nil {
		return nil, err
	}
	return l, nil
}

// NewGCRA returns a GCRA limiter (generic cell rate algorithm, ATM Forum
// Traffic Management 4.0; the algorithm of go-redis/redis_rate and
// throttled): a token bucket of capacity cfg.Limit refilled smoothly at
// cfg.Limit units per cfg.Window, so a key may burst cfg.Limit units and then
// one unit every Window/Limit. Arithmetic is exact: the emission interval is
// kept as a fraction, never rounded.
//
// It returns an error wrapping ErrInvalidConfig if cfg is invalid. The
// limiter is safe for concurrent use; Close ends its sweeps by the janitor.
func NewGCRA(cfg Config) (Limiter, error) {
	l := &gcraLimiter{}
	if err := l.c.Init(toCore(cfg)); err != nil {
		return nil, err
	}
	return l, nil
}
