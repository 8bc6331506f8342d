package sync

import (
	"context"
	"errors"
	"math/big"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// muldivProbe runs the scripts' muldiv and fdiv on triples passed in ARGV.
var muldivProbe = redis.NewScript(luaLib + `
local out = {}
for i = 1, #ARGV, 3 do
  local a, b, d = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local q, r = muldiv(a, b, d)
  out[#out + 1] = q
  out[#out + 1] = r
end
return out
`)

// TestLuaMulDiv checks the scripts' 53-bit-safe muldiv against math/big on
// random inputs inside its preconditions, including the extremes the
// scripts reach (a count near 2^30 times ten years in microseconds).
func TestLuaMulDiv(t *testing.T) {
	c := sharedClient(t)
	rng := rand.New(rand.NewPCG(7, 7))
	type triple struct{ a, b, d int64 }
	cases := []triple{
		{0, 0, 1}, {1, 1, 1}, {1<<31 - 1, 1<<51 - 1, 1<<51 - 1}, {shardlimit.MaxLimit, 315_360_000_000_000, 315_360_000_000_000},
		{1_000_000_000, 86_400_000_000, 86_400_000_000}, {1, 31_536_000_000_000, 1_000_000_000},
		{999_999_999, 86_400_000_000, 1_000_000_000}, {3, 1_333_334, 2_000_000},
	}
	for range 3000 {
		d := 1 + rng.Int64N(1<<51-1)
		if rng.IntN(2) == 0 {
			d = 1 + rng.Int64N(1<<31-1)
		}
		a := rng.Int64N(1 << 31)
		// b < 2^53 with a*b/d < 2^53: b <= d*2^53/a, and b < 2^53.
		bmax := int64(1<<53 - 1)
		if a > 0 {
			lim := new(big.Int).Div(new(big.Int).Mul(big.NewInt(d), big.NewInt(1<<53-1)), big.NewInt(a))
			if lim.IsInt64() && lim.Int64() < bmax {
				bmax = lim.Int64()
			}
		}
		cases = append(cases, triple{a, rng.Int64N(bmax + 1), d})
	}
	args := make([]any, 0, 3*len(cases))
	for _, tc := range cases {
		args = append(args, strconv.FormatInt(tc.a, 10), strconv.FormatInt(tc.b, 10), strconv.FormatInt(tc.d, 10))
	}
	v, err := muldivProbe.Run(ctxT(t, 10*time.Second), c, nil, args...).Result()
	if err != nil {
		t.Fatal(err)
	}
	got, ok := v.([]any)
	if !ok || len(got) != 2*len(cases) {
		t.Fatalf("reply %T of %d", v, len(got))
	}
	for i, tc := range cases {
		q, r := new(big.Int).QuoRem(new(big.Int).Mul(big.NewInt(tc.a), big.NewInt(tc.b)), big.NewInt(tc.d), new(big.Int))
		gq, _ := got[2*i].(int64)
		gr, _ := got[2*i+1].(int64)
		if !q.IsInt64() || q.Int64() != gq || r.Int64() != gr {
			t.Fatalf("muldiv(%d, %d, %d) = %d, %d; want %v, %v", tc.a, tc.b, tc.d, gq, gr, q, r)
		}
	}
}

// TestDecodeNeverPanics feeds the reply decoders every shape go-redis can
// return.
func TestDecodeNeverPanics(t *testing.T) {
	weird := []any{
		nil, "OK", int64(1), float64(1.5), true, new(big.Int), map[any]any{"a": int64(1)},
		[]any{}, []any{nil}, []any{int64(1), nil, "x", []any{}}, []any{int64(1), int64(0), int64(0), int64(0)},
		[]any{int64(1) << 62, int64(-1) << 62, int64(0), int64(0)}, []any{int64(0), int64(0), int64(0), int64(1) << 62},
		[]string{"1"}, []int64{1, 2, 3, 4}, redis.Nil,
	}
	one := []exactRate{{window: time.Minute}}
	two := []exactRate{{window: time.Second}, {window: time.Minute}}
	for _, v := range weird {
		for _, lim := range []int{0, 1, shardlimit.MaxLimit} {
			for _, n := range []int{0, 1, 2} {
				_, _ = decodeDecision(v, n, []int{lim}, one)
				_, _ = decodeDecision(v, n, []int{lim, lim}, two)
			}
		}
		for _, n := range []int{0, 1, 4} {
			_, _ = decodeTotals(v, n, nil)
		}
	}
	if d, err := decodeDecision([]any{int64(0), int64(0), int64(5), int64(0), int64(1), int64(0), int64(0)}, 1, []int{3}, one); err != nil || d.res.RetryAfter != time.Microsecond {
		t.Fatalf("denied with retry 0: %+v, %v; want RetryAfter 1us", d.res, err)
	}
}

// TestExactClockStepBack: the server clock (here: the instants passed)
// stepping back never admits more than the limit, never errors, and gives a
// positive RetryAfter at most the step longer than the wait before it. (Redis
// TIME is one clock for every process and steps back only with its host's
// clock, so the scripts keep the simpler, never-over-admitting rule.)
func TestExactClockStepBack(t *testing.T) {
	for name, cfg := range map[string]shardlimit.Config{
		"fixed":     fixedCfg(5, 10*time.Second),
		"counterS2": counterCfg(5, 10*time.Second, 10),
		"gcra":      gcraCfg(5, 10*time.Second),
	} {
		t.Run(name, func(t *testing.T) {
			e := replay(t, cfg)
			for range 3 {
				if !e.AllowN("k", at(100*time.Second), 1).Allowed {
					t.Fatal("denied before the step")
				}
			}
			got := 0
			for range 5 {
				r := e.AllowN("k", at(95*time.Second), 1)
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				if r.Allowed {
					got++
					continue
				}
				if r.RetryAfter <= 0 || r.RetryAfter > cfg.Window+5*time.Second {
					t.Fatalf("after the step: %+v", r)
				}
			}
			if got > 2 {
				t.Fatalf("after stepping back 5s: %d admitted, want at most 2 (3 of 5 already used)", got)
			}
			if st := e.ExactStats(); st.Errors != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// TestExactBraceKey: keys with braces are hex-encoded into the hash tag and
// work like any other.
func TestExactBraceKey(t *testing.T) {
	e := replay(t, fixedCfg(1, time.Minute))
	for _, key := range []string{"}x{", "{a}", "a}"} {
		if r := e.AllowN(key, T0, 1); !r.Allowed {
			t.Fatalf("%q: %+v", key, r)
		}
		if r := e.AllowN(key, T0, 1); r.Allowed {
			t.Fatalf("%q admitted twice", key)
		}
	}
	if k := e.StateKeys("}x{")[0]; k != e.prefix+"#{7d787b}:fw:60000000" {
		t.Fatalf("StateKeys = %q", k)
	}
}

// TestExactCounterStaleBuckets: with many buckets, an admission after a
// long pause deletes every stale bucket (in chunks, below Lua's stack
// limit) and the hash keeps only live ones. The window is a minute (G =
// 60 ms of the replayed instants): the hash's TTL runs in real time, so a
// one-second window could expire it while a loaded machine is still filling.
func TestExactCounterStaleBuckets(t *testing.T) {
	c := sharedClient(t)
	e := replay(t, counterCfg(5000, time.Minute, 1000))
	for i := range 1200 {
		if r := e.AllowN("k", at(time.Duration(i)*60*time.Millisecond), 1); !r.Allowed {
			t.Fatalf("call %d: %+v", i, r)
		}
	}
	ctx := ctxT(t, 5*time.Second)
	if n := c.HLen(ctx, e.StateKeys("k")[0]).Val(); n < 1000 || n > 1200 {
		t.Fatalf("HLEN = %d while filling", n)
	}
	if r := e.AllowN("k", at(10*time.Minute), 1); !r.Allowed || r.Remaining != 4999 {
		t.Fatalf("after the pause: %+v", r)
	}
	if n := c.HLen(ctx, e.StateKeys("k")[0]).Val(); n != 2 {
		t.Fatalf("HLEN = %d after the pause, want 2 (one bucket and the birth)", n)
	}
}

// TestExactAllowNContext: a caller's context that ends first is reported in
// Result.Err and does not degrade the limiter.
func TestExactAllowNContext(t *testing.T) {
	p := redistest.StartProxy(t, redistest.RequireRedis(t))
	e := newExact(t, newClient(t, p.Addr), ExactConfig{Config: gcraCfg(5, time.Minute)})
	if r := e.AllowNContext(context.Background(), "k", time.Now(), 1); !r.Allowed || r.Remaining != 4 {
		t.Fatalf("healthy: %+v", r)
	}
	p.SetMode(redistest.Blackhole)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	r := e.AllowNContext(ctx, "k", time.Now(), 1)
	if !errors.Is(r.Err, context.DeadlineExceeded) || r.Allowed || r.Limit != 5 {
		t.Fatalf("caller deadline: %+v", r)
	}
	if st := e.ExactStats(); st.State != Healthy || st.PolicyDecisions != 0 {
		t.Fatalf("stats %+v", st)
	}
	p.SetMode(redistest.Drop)
}
