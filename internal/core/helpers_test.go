package core

import (
	"errors"
	"math"
	"testing"
	"time"
)

// t0 is the origin of the step tables: a Unix instant that is a
// multiple of every window used (60 s, 1 h, 1 day, 365 days).
const t0Unix = 1_734_480_000

var t0 = time.Unix(t0Unix, 0)

// at returns the instant sec seconds after t0 (negative: before), exact to
// the nanosecond for values with at most nine decimals.
func at(sec float64) time.Time {
	return t0.Add(time.Duration(math.Round(sec * 1e9)))
}

// never marks an expected Retry-After of Never in step tables; dontCare
// skips a check.
const (
	never    = -1
	dontCare = -2
)

// step is one call in a step table: at seconds after t0, cost n, and the
// expected outcome. rem and retry (whole seconds, rounded up as in
// Retry-After) may be dontCare; retry is 0 for an admitted call.
type step struct {
	at      float64
	n       int
	allowed bool
	rem     int
	retry   int64
}

// ceilSeconds rounds d up to whole seconds, as HTTP headers do.
func ceilSeconds(d time.Duration) int64 {
	if d == Never {
		return never
	}
	return int64((d + time.Second - 1) / time.Second)
}

// mustNew builds a limiter with no janitor that the test closes.
func mustNew(tb testing.TB, cfg Config) Limiter {
	tb.Helper()
	if cfg.JanitorInterval == 0 {
		cfg.JanitorInterval = -1
	}
	l, err := New(cfg)
	if err != nil {
		tb.Fatalf("New(%+v): %v", cfg, err)
	}
	tb.Cleanup(func() { l.Close() })
	return l
}

// cfgFor returns a config of alg with limit, window and, for the counter,
// buckets of size g (0: default).
func cfgFor(alg Algorithm, limit int, window, g time.Duration) Config {
	cfg := Config{Algorithm: alg, Limit: limit, Window: window}
	if g > 0 {
		cfg.Buckets = int(window / g)
	}
	return cfg
}

// runSteps applies steps to key in order and checks each outcome.
func runSteps(t *testing.T, l Limiter, key string, steps []step) {
	t.Helper()
	for i, s := range steps {
		checkStep(t, i, l.AllowN(key, at(s.at), s.n), s)
	}
}

func checkStep(t *testing.T, i int, r Result, s step) {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("step %d (t=%v n=%d): unexpected error %v", i, s.at, s.n, r.Err)
	}
	if r.Allowed != s.allowed {
		t.Fatalf("step %d (t=%v n=%d): allowed=%v, want %v (%+v)", i, s.at, s.n, r.Allowed, s.allowed, r)
	}
	if s.rem != dontCare && r.Remaining != s.rem {
		t.Fatalf("step %d (t=%v n=%d): remaining=%d, want %d (%+v)", i, s.at, s.n, r.Remaining, s.rem, r)
	}
	if s.retry != dontCare {
		if got := ceilSeconds(r.RetryAfter); got != s.retry {
			t.Fatalf("step %d (t=%v n=%d): retry-after=%ds (%v), want %ds (%+v)", i, s.at, s.n, got, r.RetryAfter, s.retry, r)
		}
	}
	checkResultSane(t, r)
}

// checkResultSane checks the invariants every result keeps.
func checkResultSane(t testing.TB, r Result) {
	t.Helper()
	if r.Remaining < 0 || r.Remaining > r.Limit {
		t.Fatalf("remaining %d outside [0, %d]: %+v", r.Remaining, r.Limit, r)
	}
	if r.ResetAfter < 0 {
		t.Fatalf("negative reset-after: %+v", r)
	}
	if r.Allowed && r.RetryAfter != 0 {
		t.Fatalf("allowed with retry-after: %+v", r)
	}
	if !r.Allowed && r.Err == nil && r.RetryAfter <= 0 {
		t.Fatalf("denied without a positive retry-after: %+v", r)
	}
}

// repeat returns k copies of s.
func repeat(k int, s step) []step {
	out := make([]step, k)
	for i := range out {
		out[i] = s
	}
	return out
}

// countdown returns k admitted steps at sec with remaining from k-1+extra
// down to extra.
func countdown(sec float64, k, extra int) []step {
	out := make([]step, k)
	for i := range out {
		out[i] = step{at: sec, n: 1, allowed: true, rem: k - 1 - i + extra}
	}
	return out
}

func concat(parts ...[]step) []step {
	var out []step
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v, want %v", err, target)
	}
}

var allAlgorithms = []Algorithm{FixedWindow, SlidingLog, SlidingCounter, GCRA}

// keyShard returns the index of key's shard in l and whether key is
// stored.
func keyShard(l Limiter, key string) (int, bool) {
	switch l := l.(type) {
	case *FixedLimiter:
		return lookupKey(&l.tab, key)
	case *LogLimiter:
		return lookupKey(&l.tab, key)
	case *CounterLimiter:
		return lookupKey(&l.tab, key)
	case *GCRALimiter:
		return lookupKey(&l.tab, key)
	}
	panic("no table")
}

// shardForgot returns the forgot instant of key's shard (see
// shard.forgot).
func shardForgot(l Limiter, key string) int64 {
	switch l := l.(type) {
	case *FixedLimiter:
		return forgotOf(&l.tab, key)
	case *LogLimiter:
		return forgotOf(&l.tab, key)
	case *CounterLimiter:
		return forgotOf(&l.tab, key)
	case *GCRALimiter:
		return forgotOf(&l.tab, key)
	}
	panic("no table")
}

func forgotOf[E any](tab *table[E], key string) int64 {
	s := tab.shardFor(tab.hash(key))
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.forgot
}

func lookupKey[E any](tab *table[E], key string) (int, bool) {
	h := tab.hash(key)
	s := tab.shardFor(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := find(s, h, key)
	return int(h & tab.mask), ok
}

// Windows of the step tables of several rates.
const (
	w100ms = 100 * time.Millisecond
	w1s    = time.Second
	w10s   = 10 * time.Second
	w1m    = time.Minute
)

// rstep is one call in a step table of several rates: at seconds after t0,
// cost n, and the expected Result: Allowed, the binding rate's Remaining,
// Limit and Window, and RetryAfter exactly (0 when admitted, Never, or
// anyRetry to skip).
type rstep struct {
	at      float64
	n       int
	allowed bool
	rem     int
	limit   int
	window  time.Duration
	retry   time.Duration
}

const anyRetry = time.Duration(-1)

// ms returns x milliseconds, exact for whole nanoseconds.
func ms(x float64) time.Duration { return time.Duration(x * 1e6) }

// runRateSteps applies steps to key in order. Before each call a Peek at
// the same instant must answer what the call decides; after a denied call
// whose RetryAfter is finite, a peek RetryAfter later must be admitted and
// one a nanosecond sooner denied.
func runRateSteps(t *testing.T, l Limiter, key string, steps []rstep) {
	t.Helper()
	for i, s := range steps {
		now := at(s.at)
		p := l.Peek(key, now, s.n)
		r := l.AllowN(key, now, s.n)
		if r.Err != nil {
			t.Fatalf("step %d (t=%v n=%d): error %v", i, s.at, s.n, r.Err)
		}
		if p != r {
			t.Fatalf("step %d (t=%v n=%d): peek %+v, then AllowN %+v", i, s.at, s.n, p, r)
		}
		if r.Allowed != s.allowed || r.Remaining != s.rem || r.Limit != s.limit || r.Window != s.window ||
			s.retry != anyRetry && r.RetryAfter != s.retry {
			t.Fatalf("step %d (t=%v n=%d): %+v\nwant allowed=%v remaining=%d limit=%d window=%v retry=%v",
				i, s.at, s.n, r, s.allowed, s.rem, s.limit, s.window, s.retry)
		}
		checkResultSane(t, r)
		if !r.Allowed && r.RetryAfter != Never {
			checkRetryExact(t, l, key, now, s.n, r.RetryAfter)
		}
	}
}

// checkRetryExact checks that n units for key fit at now+retry and not a
// nanosecond sooner, by peeks (which change nothing).
func checkRetryExact(t *testing.T, l Limiter, key string, now time.Time, n int, retry time.Duration) {
	t.Helper()
	if r := l.Peek(key, now.Add(retry-1), n); r.Allowed {
		t.Fatalf("n=%d at %v: admitted a nanosecond before its RetryAfter %v: %+v", n, now.Sub(t0), retry, r)
	}
	if r := l.Peek(key, now.Add(retry), n); !r.Allowed {
		t.Fatalf("n=%d at %v: denied at its RetryAfter %v: %+v", n, now.Sub(t0), retry, r)
	}
}

// twoRates is the shape: a short burst limit and a long quota,
// given longest last.
var twoRates = []Rate{{3, time.Second}, {10, time.Minute}}

// threeRates: 2 per 100 ms, 5 per second, 8 per 10 s, given out of order.
var threeRates = []Rate{{5, time.Second}, {8, 10 * time.Second}, {2, 100 * time.Millisecond}}

// rateCfg returns a config of alg with rates (10 buckets per window for
// the counter), no janitor.
func rateCfg(alg Algorithm, rates []Rate) Config {
	return Config{Algorithm: alg, Rates: rates, Buckets: 10, JanitorInterval: -1}
}
