package shardlimit

import (
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

// Reference models: naive, obviously correct implementations of the four
// algorithms with exact arithmetic (math/big where a product could
// overflow), checked against the fast ones on random sequences and by a
// fuzz target. Instants are Unix nanoseconds. The harness also feeds the
// limiter instants behind a key's latest; the models see them raised to
// the key's running maximum (the time rule), and the limiter's durations,
// measured from the caller's instant, end where the model's do.

type model interface {
	// decide decides n units for key at t under limit lim, the key's state
	// being encoded for limit enc (0: none); a state re-encoded for lim is
	// kept only when consume.
	decide(key string, t int64, n int, consume bool, lim, enc int) Result
	// relimit re-encodes key's state from old to lim at once (SetLimit),
	// relative to the key's latest instant last.
	relimit(key string, last int64, old, lim int)
}

// fixedModel: a count per key and window id floor(t/W).
type fixedModel struct {
	w     int64
	win   map[string]int64
	count map[string]int
}

func (m *fixedModel) decide(key string, t int64, n int, consume bool, lim, _ int) Result {
	id := t / m.w
	used := 0
	if w, ok := m.win[key]; ok && w == id {
		used = m.count[key]
	}
	r := Result{Limit: lim, ResetAfter: time.Duration((id+1)*m.w - t)}
	switch {
	case n == 0:
		r.Allowed = true
	case n > lim:
		r.RetryAfter = Never
	case used+n <= lim:
		r.Allowed = true
		used += n
		if consume {
			m.win[key], m.count[key] = id, used
		}
	default:
		r.RetryAfter = time.Duration((id+1)*m.w - t)
	}
	r.Remaining = max(0, lim-used)
	return r
}

func (m *fixedModel) relimit(string, int64, int, int) {}

// logModel: every admitted unit's exact instant.
type logModel struct {
	w     int64
	units map[string][]int64 // ascending
}

func (m *logModel) decide(key string, t int64, n int, consume bool, lim, _ int) Result {
	var live []int64
	for _, s := range m.units[key] {
		if s <= t && t < s+m.w {
			live = append(live, s)
		}
	}

	r := Result{Limit: lim}
	used := len(live)
	switch {
	case n == 0:
		r.Allowed = true
	case n > lim:
		r.RetryAfter = Never
	case used+n <= lim:
		r.Allowed = true
		used += n
		for range n {
			live = append(live, t)
		}
		if consume {
			m.units[key] = live
		}
	default:
		r.RetryAfter = time.Duration(live[used+n-lim-1] + m.w - t)
	}
	r.Remaining = max(0, lim-used)
	r.ResetAfter = time.Duration(m.w)
	if len(live) > 0 && (consume || !r.Allowed || n == 0 || len(live) > used-n) {
		r.ResetAfter = time.Duration(live[0] + m.w - t)
	}
	if r.Allowed && n > 0 && !consume && used == n {
		r.ResetAfter = time.Duration(m.w)
	}
	return r
}

func (m *logModel) relimit(string, int64, int, int) {}

// counterModel: policy S2 with a map of bucket counts per key; the retry
// instant is found by binary search, the estimate being non-increasing in
// time.
type counterModel struct {
	w, g    int64
	n       int64
	buckets map[string]map[int64]int
}

func (m *counterModel) estimate(b map[int64]int, t int64) int64 {
	j := t / m.g
	var sum int64
	for id := j - m.n + 1; id <= j; id++ {
		sum += int64(b[id])
	}
	num := new(big.Int).Mul(big.NewInt(int64(b[j-m.n])), big.NewInt(m.g-(t-j*m.g)))
	q, r := new(big.Int).QuoRem(num, big.NewInt(m.g), new(big.Int))
	if r.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return sum + q.Int64()
}

func (m *counterModel) decide(key string, t int64, n int, consume bool, lim, _ int) Result {
	b := m.buckets[key]
	if b == nil {
		b = map[int64]int{}
		m.buckets[key] = b
	}
	est := m.estimate(b, t)
	r := Result{Limit: lim}
	j := t / m.g
	switch {
	case n == 0:
		r.Allowed = true
	case n > lim:
		r.RetryAfter = Never
	case est+int64(n) <= int64(lim):
		r.Allowed = true
		est += int64(n)
		if consume {
			b[j] += n
		}
	default:
		lo, hi := t, t+m.w+2*m.g // est(lo)+n > lim, est(hi)+n <= lim
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			if m.estimate(b, mid)+int64(n) <= int64(lim) {
				hi = mid
			} else {
				lo = mid
			}
		}
		r.RetryAfter = time.Duration(hi - t)
	}
	r.Remaining = int(max(0, int64(lim)-est))
	oldest := j
	for id := j - m.n; id <= j; id++ {
		if b[id] != 0 {
			oldest = id
			break
		}
	}
	r.ResetAfter = time.Duration((oldest+m.n+1)*m.g - t)
	return r
}

func (m *counterModel) relimit(string, int64, int, int) {}

// gcraModel: the theoretical arrival time as an exact rational.
type gcraModel struct {
	w   int64
	tat map[string]*big.Rat
}

func (m *gcraModel) decide(key string, t int64, n int, consume bool, lim, enc int) Result {
	now := new(big.Rat).SetInt64(t)
	tat := now
	if v := m.tat[key]; v != nil && v.Cmp(now) > 0 {
		tat = v
		if lim > 0 && enc > 0 && lim != enc {
			d := new(big.Rat).Sub(tat, now)
			tat = d.Add(d.Mul(d, big.NewRat(int64(enc), int64(lim))), now)
			if consume {
				m.tat[key] = tat
			}
		}
	}
	w := new(big.Rat).SetInt64(m.w)
	r := Result{Limit: lim}
	switch {
	case n == 0:
		r.Allowed = true
	case n > lim:
		r.RetryAfter = Never
	default:
		ntat := new(big.Rat).Add(tat, big.NewRat(int64(n)*m.w, int64(lim)))
		if new(big.Rat).Sub(ntat, now).Cmp(w) <= 0 {
			r.Allowed = true
			tat = ntat
			if consume {
				m.tat[key] = ntat
			}
		} else {
			r.RetryAfter = time.Duration(ceilRat(new(big.Rat).Sub(ntat, w)) - t)
		}
	}
	if lim > 0 {
		// floor((W - (tat - t)) * L / W), at least 0
		left := new(big.Rat).Sub(w, new(big.Rat).Sub(tat, now))
		q := new(big.Rat).Quo(new(big.Rat).Mul(left, big.NewRat(int64(lim), 1)), w)
		r.Remaining = int(max(0, floorRat(q)))
	}
	r.ResetAfter = time.Duration(ceilRat(tat) - t)
	return r
}

func (m *gcraModel) relimit(key string, last int64, old, lim int) {
	v := m.tat[key]
	if v == nil || old == 0 {
		return
	}
	l := new(big.Rat).SetInt64(last)
	if v.Cmp(l) <= 0 {
		return
	}
	d := new(big.Rat).Sub(v, l)
	d.Mul(d, big.NewRat(int64(old), int64(lim)))
	m.tat[key] = d.Add(d, l)
}

func floorRat(x *big.Rat) int64 {
	q := new(big.Int).Div(x.Num(), x.Denom()) // Euclidean: floor for positive denominators
	return q.Int64()
}

func ceilRat(x *big.Rat) int64 {
	f := floorRat(x)
	if new(big.Rat).SetInt64(f).Cmp(x) != 0 {
		f++
	}
	return f
}

// harness runs one limiter and its model side by side.
type harness struct {
	t      testing.TB
	alg    Algorithm
	l      Limiter
	m      model
	def    int
	own    map[string]int   // keys with their own limit
	enc    map[string]int   // the limit each stored key's state is encoded for
	last   map[string]int64 // each stored key's latest instant
	unit   int64            // instants are multiples of unit
	window int64
	calls  int // consuming calls so far: they rotate through the API's forms
}

func newHarness(tb testing.TB, alg Algorithm, limit int, window time.Duration, buckets int) *harness {
	l := mustNew(tb, Config{Algorithm: alg, Limit: limit, Window: window, Buckets: buckets, Shards: 4})
	w := int64(window)
	h := &harness{t: tb, alg: alg, l: l, def: limit, own: map[string]int{}, enc: map[string]int{},
		last: map[string]int64{}, unit: 1, window: w}
	switch alg {
	case FixedWindow:
		h.m = &fixedModel{w: w, win: map[string]int64{}, count: map[string]int{}}
	case SlidingLog:
		h.m = &logModel{w: w, units: map[string][]int64{}}
		h.unit = logUnit(w)
	case SlidingCounter:
		h.m = &counterModel{w: w, g: w / int64(buckets), n: int64(buckets), buckets: map[string]map[int64]int{}}
	case GCRA:
		h.m = &gcraModel{w: w, tat: map[string]*big.Rat{}}
	}
	return h
}

func (h *harness) limitOf(key string) int {
	if v, ok := h.own[key]; ok {
		return v
	}
	return h.def
}

func (h *harness) allow(key string, t int64, n int, consume bool) {
	h.t.Helper()
	caller := t
	t = max(t, h.last[key])
	var got Result
	boolOnly := false // the form answers Allowed only
	now := time.Unix(0, caller)
	switch h.calls++; {
	case !consume:
		got = h.l.Peek(key, now, n)
	case n == 1 && h.calls%4 == 1:
		got.Allowed, boolOnly = h.l.AllowAt(key, now), true
	case n == 1 && h.calls%4 == 2:
		got.Allowed, boolOnly = h.l.AllowBytesAt([]byte(key), now), true
	case h.calls%4 == 3:
		got = h.l.AllowBytesN([]byte(key), now, n)
	default:
		got = h.l.AllowN(key, now, n)
	}
	lim := h.limitOf(key)
	enc, stored := h.enc[key]
	// The limiter stores a key, and re-encodes its state, only on a
	// decision that may consume.
	real := consume && n > 0 && (stored || n <= lim)
	want := h.m.decide(key, t, n, real, lim, enc)
	if real {
		h.last[key] = t
		if lim > 0 || !stored {
			h.enc[key] = lim
		}
	}
	if consume && !real && n > 0 {
		want.Allowed, want.RetryAfter = false, Never // n above the limit
	}
	// Durations from the caller's instant end where the model's do.
	want.ResetAfter += time.Duration(t - caller)
	if want.RetryAfter != 0 && want.RetryAfter != Never {
		want.RetryAfter += time.Duration(t - caller)
	}
	if boolOnly {
		got = Result{Allowed: got.Allowed, Limit: want.Limit, Remaining: want.Remaining, ResetAfter: want.ResetAfter, RetryAfter: want.RetryAfter}
	}
	if got != want {
		h.t.Fatalf("%v key %q t=%d (caller %d) n=%d consume=%v limit %d:\n got %+v\nwant %+v", h.alg, key, t, caller, n, consume, lim, got, want)
	}
}

func (h *harness) setLimit(key string, lim int) {
	if err := h.l.SetLimit(key, lim); err != nil {
		h.t.Fatal(err)
	}
	h.own[key] = lim
	enc, stored := h.enc[key]
	switch {
	case !stored:
		h.enc[key] = max(lim, 0)
		if lim == 0 {
			h.enc[key] = h.def
		}
	case lim > 0 && enc != lim:
		if enc > 0 {
			h.m.relimit(key, h.last[key], enc, lim)
		}
		h.enc[key] = lim
	}
}

func (h *harness) clearLimit(key string) {
	if err := h.l.ClearLimit(key); err != nil {
		h.t.Fatal(err)
	}
	delete(h.own, key)
}

func (h *harness) setDefault(lim int) {
	if err := h.l.SetDefaultLimit(lim); err != nil {
		h.t.Fatal(err)
	}
	h.def = lim
}

// step runs one random operation drawn from r. One decision in four comes
// with an instant behind the clock, by up to two windows (gap's upper
// bits): a request read early, a stalled caller, a clock stepped back.
func (h *harness) step(op, key, gap, n, lim uint8, clock *int64) {
	*clock += int64(gap%64) * h.window / 64 / h.unit * h.unit
	now := *clock
	if op>>4&3 == 0 {
		now -= int64(gap>>2) * h.window / 32 / h.unit * h.unit
	}
	k := string('a' + rune(key%4))
	cost := int(n) % (h.limitOf(k) + 2)
	switch op % 16 {
	case 0:
		h.allow(k, now, cost, false)
	case 1:
		if lim%4 == 0 {
			h.setDefault(int(lim % 9))
		} else {
			h.setLimit(k, int(lim%9))
		}
	case 2:
		h.clearLimit(k)
	default:
		h.allow(k, now, cost, true)
	}
}

var modelConfigs = []struct {
	alg     Algorithm
	window  time.Duration
	buckets int
}{
	{FixedWindow, time.Second, 0},
	{FixedWindow, 7 * time.Second, 0},
	{SlidingLog, time.Second, 0},
	{SlidingLog, time.Minute, 0},
	{SlidingCounter, time.Second, 10},
	{SlidingCounter, 3 * time.Second, 3},
	{SlidingCounter, time.Minute, 1},
	{GCRA, time.Second, 0},
	{GCRA, 7 * time.Second, 0},
}

func TestAlgorithmsMatchReferenceModels(t *testing.T) {
	for _, c := range modelConfigs {
		t.Run(c.alg.String()+"/"+c.window.String(), func(t *testing.T) {
			for seed := range uint64(20) {
				rng := rand.New(rand.NewPCG(seed, uint64(c.alg)))
				h := newHarness(t, c.alg, 1+rng.IntN(8), c.window, c.buckets)
				clock := int64(t0Unix) * 1e9
				for range 2000 {
					h.step(uint8(rng.Uint32()), uint8(rng.Uint32()), uint8(rng.IntN(24)|rng.IntN(4)<<6), uint8(rng.Uint32()), uint8(rng.Uint32()), &clock)
				}
			}
		})
	}
}

// FuzzAlgorithmsMatchReferenceModels drives every configuration with
// operations decoded from the input, five bytes each. Run longer by hand:
//
//	go test -run '^$' -fuzz FuzzAlgorithmsMatchReferenceModels -fuzztime 5m
func FuzzAlgorithmsMatchReferenceModels(f *testing.F) {
	f.Add(uint8(0), uint8(5), []byte("\x03\x00\x00\x01\x00\x03\x00\x00\x01\x00\x03\x00\x30\x01\x00"))
	f.Add(uint8(4), uint8(2), []byte("\x03\x01\x10\x03\x00\x01\x01\x00\x00\x05\x03\x01\x01\x07\x00"))
	f.Fuzz(func(t *testing.T, cfg, limit uint8, ops []byte) {
		c := modelConfigs[int(cfg)%len(modelConfigs)]
		h := newHarness(t, c.alg, int(limit%10), c.window, c.buckets)
		clock := int64(t0Unix) * 1e9
		for i := 0; i+5 <= len(ops) && i < 5*500; i += 5 {
			h.step(ops[i], ops[i+1], ops[i+2], ops[i+3], ops[i+4], &clock)
		}
	})
}
