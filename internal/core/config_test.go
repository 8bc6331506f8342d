package core

import (
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestConfigValidation(t *testing.T) {
	ok := Config{Limit: 10, Window: time.Second}
	bad := []struct {
		name string
		alg  Algorithm
		mod  func(*Config)
	}{
		{"negative limit", FixedWindow, func(c *Config) { c.Limit = -1 }},
		{"limit above max", GCRA, func(c *Config) { c.Limit = MaxLimit + 1 }},
		{"log limit above max", SlidingLog, func(c *Config) { c.Limit = MaxSlidingLogLimit + 1 }},
		{"zero window", FixedWindow, func(c *Config) { c.Window = 0 }},
		{"negative window", GCRA, func(c *Config) { c.Window = -time.Second }},
		{"window too long", SlidingLog, func(c *Config) { c.Window = MaxWindow + 1 }},
		{"negative buckets", SlidingCounter, func(c *Config) { c.Buckets = -1 }},
		{"buckets not dividing", SlidingCounter, func(c *Config) { c.Window = 7; c.Buckets = 2 }},
		{"buckets above max", SlidingCounter, func(c *Config) { c.Buckets = MaxBuckets + 1; c.Window = time.Duration(MaxBuckets+1) * time.Second }},
		{"shards not a power of two", FixedWindow, func(c *Config) { c.Shards = 3 }},
		{"negative shards", FixedWindow, func(c *Config) { c.Shards = -4 }},
		{"too many shards", FixedWindow, func(c *Config) { c.Shards = MaxShards * 2 }},
		{"negative max keys", FixedWindow, func(c *Config) { c.MaxKeys = -1 }},
		{"unknown full policy", FixedWindow, func(c *Config) { c.WhenFull = 7 }},
		{"key bytes above max", FixedWindow, func(c *Config) { c.MaxKeyBytes = MaxKeyBytesLimit + 1 }},
		{"negative key bytes", FixedWindow, func(c *Config) { c.MaxKeyBytes = -1 }},
		{"janitor interval below the minimum", GCRA, func(c *Config) { c.JanitorInterval = MinJanitorInterval - 1 }},
		{"unknown algorithm", Algorithm(9), func(c *Config) {}},
		{"zero algorithm", 0, func(c *Config) {}},
	}
	for _, b := range bad {
		cfg := ok
		cfg.Algorithm = b.alg
		b.mod(&cfg)
		l, err := New(cfg)
		if !errors.Is(err, ErrInvalidConfig) || l != nil {
			t.Errorf("%s: New(%+v) = %v, %v; want ErrInvalidConfig", b.name, cfg, l, err)
		}
	}
	for _, alg := range allAlgorithms {
		cfg := ok
		cfg.Algorithm = alg
		l := mustNew(t, cfg)
		got := l.Config()
		if got.Shards < 16 || got.Shards&(got.Shards-1) != 0 || got.MaxKeyBytes != DefaultMaxKeyBytes ||
			got.JanitorInterval != -1 || got.Clock == nil || got.Algorithm != alg || got.Buckets != DefaultBuckets {
			t.Errorf("%v defaults: %+v", alg, got)
		}
		wantErr(t, l.SetDefaultLimit(-1), ErrInvalidConfig)
		if err := l.SetDefaultLimit(3); err != nil || l.Config().Limit != 3 {
			t.Errorf("SetDefaultLimit: %v %+v", err, l.Config())
		}
	}
}

func TestKeyValidation(t *testing.T) {
	for _, alg := range allAlgorithms {
		l := mustNew(t, Config{Algorithm: alg, Limit: 5, Window: time.Second, MaxKeyBytes: 8})
		for _, key := range []string{"", "123456789", strings.Repeat("x", 1<<20)} {
			r := l.AllowN(key, at(0), 1)
			wantErr(t, r.Err, ErrInvalidKey)
			if r.Allowed || l.Allow(key) || l.AllowBytes([]byte(key)) {
				t.Fatalf("%v: invalid key %.10q admitted", alg, key)
			}
			wantErr(t, l.SetLimit(key, 1), ErrInvalidKey)
			wantErr(t, l.Reset(key), ErrInvalidKey)
			wantErr(t, l.ClearLimit(key), ErrInvalidKey)
		}
		if r := l.AllowN("12345678", at(0), 1); !r.Allowed {
			t.Fatalf("%v: key of exactly MaxKeyBytes: %+v", alg, r)
		}
		if l.Len() != 1 {
			t.Fatalf("%v: invalid keys were stored: len %d", alg, l.Len())
		}
	}
}

func TestCostAboveLimitIsNever(t *testing.T) {
	for _, alg := range allAlgorithms {
		l := mustNew(t, cfgFor(alg, 5, time.Second, 0))
		for _, key := range []string{"new", "new"} {
			r := l.AllowN(key, at(0), 6)
			if r.Allowed || r.RetryAfter != Never || r.Err != nil || r.Remaining != 5 {
				t.Fatalf("%v: %+v", alg, r)
			}
		}
		if l.Len() != 1 {
			// Stored with its instant, the key's latest from then on.
			t.Fatalf("%v: a request that can never succeed left %d keys, want 1", alg, l.Len())
		}
		l.AllowN("k", at(0), 1)
		if r := l.AllowN("k", at(0), math.MaxInt); r.RetryAfter != Never || r.Remaining != 4 {
			t.Fatalf("%v: huge cost on a stored key: %+v", alg, r)
		}
	}
}

func TestZeroTimeAndFarFuture(t *testing.T) {
	// The zero time.Time and instants far outside Unix nanoseconds are
	// clamped, never overflowing.
	for _, alg := range allAlgorithms {
		l := mustNew(t, cfgFor(alg, 2, time.Minute, time.Second))
		for _, now := range []time.Time{{}, time.Unix(-1e12, 0), time.Unix(1e15, 0), time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), {}} {
			checkResultSane(t, l.AllowN("k", now, 1))
			checkResultSane(t, l.Peek("k", now, 2))
		}
	}
}

func TestAlgorithmNames(t *testing.T) {
	for _, alg := range allAlgorithms {
		b, err := json.Marshal(alg)
		if err != nil {
			t.Fatal(err)
		}
		var back Algorithm
		if err := json.Unmarshal(b, &back); err != nil || back != alg {
			t.Fatalf("%v round trip: %s %v %v", alg, b, back, err)
		}
	}
	if _, err := ParseAlgorithm("leaky"); !errors.Is(err, ErrInvalidConfig) {
		t.Fatal(err)
	}
	if Algorithm(0).String() != "Algorithm(0)" {
		t.Fatal(Algorithm(0).String())
	}
}

// TestConfigRatesValidatedAndCopied: Config.Rates is validated rate by rate, copied by New
// and by Config.
func TestConfigRatesValidatedAndCopied(t *testing.T) {
	bad := []struct {
		name string
		alg  Algorithm
		cfg  Config
	}{
		{"too many rates", FixedWindow, Config{Rates: []Rate{{1, 1}, {1, 2}, {1, 3}, {1, 4}, {1, 5}}}},
		{"a window twice", GCRA, Config{Rates: []Rate{{1, time.Second}, {2, time.Second}}}},
		{"Rates and Limit", FixedWindow, Config{Limit: 3, Rates: []Rate{{1, time.Second}}}},
		{"Rates and Window", FixedWindow, Config{Window: time.Second, Rates: []Rate{{1, time.Minute}}}},
		{"a zero window", SlidingLog, Config{Rates: []Rate{{1, time.Second}, {1, 0}}}},
		{"a window too long", GCRA, Config{Rates: []Rate{{1, time.Second}, {1, MaxWindow + 1}}}},
		{"a negative limit", FixedWindow, Config{Rates: []Rate{{1, time.Second}, {-1, time.Minute}}}},
		{"a log limit too large", SlidingLog, Config{Rates: []Rate{{1, time.Second}, {MaxSlidingLogLimit + 1, time.Minute}}}},
		{"a window not a multiple of the buckets", SlidingCounter, Config{Buckets: 10, Rates: []Rate{{1, time.Second}, {1, 15}}}},
	}
	for _, b := range bad {
		b.cfg.Algorithm = b.alg
		if l, err := New(b.cfg); !errors.Is(err, ErrInvalidConfig) || l != nil {
			t.Errorf("%s: New = %v, %v; want ErrInvalidConfig", b.name, l, err)
		}
	}
	four := []Rate{{4, time.Second}, {3, 2 * time.Second}, {2, 3 * time.Second}, {1, 4 * time.Second}}
	for _, alg := range allAlgorithms {
		cfg := Config{Algorithm: alg, Rates: slices.Clone(four), JanitorInterval: -1}
		l := mustNew(t, cfg)
		cfg.Rates[0].Limit = 99 // the caller's slice is not the limiter's
		got := l.Config()
		if got.Limit != 0 || got.Window != 0 || !slices.Equal(got.Rates, four) {
			t.Fatalf("%v: Config() = %+v", alg, got)
		}
		got.Rates[1].Limit = 99
		if !slices.Equal(l.Config().Rates, four) {
			t.Fatalf("%v: Config().Rates aliases the limiter's", alg)
		}
		// Four rates: the 4 s one (1 unit) binds a fresh key.
		if r := l.AllowN("k", at(0), 1); !r.Allowed || r.Window != 4*time.Second || r.Limit != 1 || r.Remaining != 0 {
			t.Fatalf("%v: %+v", alg, r)
		}
		if r := l.AllowN("k", at(0), 2); r.Allowed || r.RetryAfter != Never || r.Window != 4*time.Second {
			t.Fatalf("%v: %+v", alg, r)
		}
	}
}

// TestExtremeRatesGiveSaneResults: a nanosecond's window beside ten years', limits of 1
// and the largest, costs up to MaxLimit, instants from the epoch to the
// last accepted one and back: every Result is sane, and a finite
// RetryAfter is exact.
func TestExtremeRatesGiveSaneResults(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			big := MaxLimit
			if alg == SlidingLog {
				big = 1000 // the ring would grow to 64 MiB at MaxSlidingLogLimit
			}
			for _, rates := range [][]Rate{
				{{1, 1}, {big, MaxWindow}},
				{{big, 1}, {1, MaxWindow}},
				{{3, 1}, {5, 2}, {7, 3}, {big, MaxWindow}},
			} {
				l := mustNew(t, Config{Algorithm: alg, Rates: rates, Buckets: 1})
				hi := time.Unix(0, maxInstant-1)
				instants := []time.Time{time.Unix(0, 0), time.Unix(0, 1), time.Unix(0, 2), t0, t0, t0.Add(1), t0.Add(-1),
					hi.Add(-MaxWindow), hi.Add(-2), hi.Add(-1), hi, time.Unix(0, 5), hi}
				for _, now := range instants {
					for _, n := range []int{0, 1, 2, 3, big, big + 1, MaxLimit} {
						r := l.AllowN("k", now, n)
						if r.Err != nil {
							t.Fatalf("%v at %d n=%d: %+v", rates, now.UnixNano(), n, r)
						}
						checkResultSane(t, r)
						if !r.Allowed && r.RetryAfter != Never && now.UnixNano()+int64(r.RetryAfter) <= maxInstant {
							checkRetryExact(t, l, "k", now, n, r.RetryAfter)
						}
					}
				}
			}
		})
	}
}

// TestAlgorithmErrorsNameTheChoices checks that a newcomer who leaves
// Algorithm unset, or misspells one in a rules file, is told what to write.
func TestAlgorithmErrorsNameTheChoices(t *testing.T) {
	_, err := New(Config{Limit: 1, Window: time.Second})
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "Algorithm is not set") ||
		!strings.Contains(err.Error(), "SlidingLog") {
		t.Errorf("New without Algorithm: %v; want ErrInvalidConfig saying it is not set and naming the choices", err)
	}
	_, err = New(Config{Algorithm: 9, Limit: 1, Window: time.Second})
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "GCRA") {
		t.Errorf("New with Algorithm 9: %v; want ErrInvalidConfig naming the choices", err)
	}
	_, err = ParseAlgorithm("leaky")
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), `"sliding_counter"`) {
		t.Errorf(`ParseAlgorithm("leaky"): %v; want ErrInvalidConfig naming the accepted names`, err)
	}
}
