package core

import (
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Reference models: naive, obviously correct implementations of the four
// algorithms with exact arithmetic (math/big where a product could
// overflow), checked against the fast ones on random sequences and by a
// fuzz target. Instants are Unix nanoseconds. The harness also feeds the
// limiter instants behind a key's latest; the models see them raised to
// the key's running maximum (the time rule), and the limiter's durations,
// measured from the caller's instant, end where the model's do. A limiter
// of several rates is modelled by one model per rate (see harness).

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

// counterModel: the sliding counter (the oldest bucket weighted by its
// overlap, rounded up) with a map of bucket counts per key; the retry
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

// harness runs one limiter and its model side by side. A limiter of K
// rates is modelled by K single-rate models combined all or nothing: a
// request is admitted iff every rate's model admits it, and then consumes
// from all of them; one any rate denies consumes from none. The Result is
// the binding rate's (the least remaining after the decision, ties to the
// longest window), its RetryAfter the latest of the rates' (Never if any
// is Never). With one rate this is the single model itself.
type harness struct {
	t      testing.TB
	alg    Algorithm
	l      Limiter
	rates  []Rate  // in the order of Config.Rates (or the one of Limit and Window)
	m      []model // one per rate, in the same order
	def    []int
	own    map[string][]int // keys with limits of their own
	enc    map[string][]int // the limit each stored key's state is encoded for, per rate
	last   map[string]int64 // each stored key's latest instant
	floor  []int64          // per shard: no new key decides earlier (see shard.floor)
	unit   int64            // instants are multiples of unit
	window int64            // the shortest window: the pace of the clock in step
	calls  int              // consuming calls so far: they rotate through the API's forms
	swept  int              // keys evicted by sweeps
}

// newHarness returns a harness of one rate, configured by Limit and Window.
func newHarness(tb testing.TB, alg Algorithm, limit int, window time.Duration, buckets int) *harness {
	return newRatesHarness(tb, alg, []Rate{{limit, window}}, buckets, false)
}

// newRatesHarness returns a harness of rates, configured by Config.Rates if
// asRates or several rates are given, else by Limit and Window.
func newRatesHarness(tb testing.TB, alg Algorithm, rates []Rate, buckets int, asRates bool) *harness {
	cfg := Config{Algorithm: alg, Buckets: buckets, Shards: 4, JanitorInterval: -1}
	if asRates || len(rates) > 1 {
		cfg.Rates = rates
	} else {
		cfg.Limit, cfg.Window = rates[0].Limit, rates[0].Window
	}
	l := mustNew(tb, cfg)
	h := &harness{t: tb, alg: alg, l: l, rates: slices.Clone(rates), own: map[string][]int{}, enc: map[string][]int{},
		last: map[string]int64{}, floor: make([]int64, 4), unit: 1, window: math.MaxInt64}
	longest := int64(0)
	for _, r := range rates {
		h.def = append(h.def, r.Limit)
		h.window = min(h.window, int64(r.Window))
		longest = max(longest, int64(r.Window))
	}
	for _, r := range rates {
		w := int64(r.Window)
		switch alg {
		case FixedWindow:
			h.m = append(h.m, &fixedModel{w: w, win: map[string]int64{}, count: map[string]int{}})
		case SlidingLog:
			h.m = append(h.m, &logModel{w: w, units: map[string][]int64{}})
		case SlidingCounter:
			h.m = append(h.m, &counterModel{w: w, g: w / int64(buckets), n: int64(buckets), buckets: map[string]map[int64]int{}})
		case GCRA:
			h.m = append(h.m, &gcraModel{w: w, tat: map[string]*big.Rat{}})
		}
	}
	if alg == SlidingLog {
		// One ring for every window, its stamps at the longest's resolution.
		h.unit = logUnit(longest)
	}
	return h
}

func (h *harness) limitsOf(key string) []int {
	if v, ok := h.own[key]; ok {
		return v
	}
	return h.def
}

// decide is the combined model's decision of n units for key at t (the
// key's latest), under limits lims, the key's state being encoded for enc
// (nil: none); real says whether the limiter keeps the decision.
func (h *harness) decide(key string, t int64, n int, real bool, lims, enc []int) Result {
	rates := len(h.m)
	e := make([]int, rates)
	copy(e, enc)
	if real {
		// A decision that may consume re-encodes every rate's state for
		// its limit, whatever it decides: the same decision with any
		// form (Result or bool) leaves the same state.
		for k := range rates {
			h.m[k].decide(key, t, 0, true, lims[k], e[k])
			if lims[k] > 0 {
				e[k] = lims[k]
			}
		}
	}
	rs := make([]Result, rates)
	all := true
	for k := range rates {
		rs[k] = h.m[k].decide(key, t, n, false, lims[k], e[k])
		all = all && rs[k].Allowed
	}
	for k := range rates {
		switch {
		case all && real:
			rs[k] = h.m[k].decide(key, t, n, true, lims[k], e[k])
		case !all && rs[k].Allowed:
			rs[k] = h.m[k].decide(key, t, 0, false, lims[k], e[k]) // its numbers without the cost
		}
	}
	b := 0
	for k := 1; k < rates; k++ {
		if rs[k].Remaining < rs[b].Remaining || rs[k].Remaining == rs[b].Remaining && h.rates[k].Window > h.rates[b].Window {
			b = k
		}
	}
	want := rs[b]
	want.Allowed = all
	want.Window = h.rates[b].Window
	want.RetryAfter = 0
	if !all {
		for _, r := range rs {
			want.RetryAfter = max(want.RetryAfter, r.RetryAfter)
		}
	}
	return want
}

func (h *harness) allow(key string, t int64, n int, consume bool) {
	h.t.Helper()
	caller := t
	t = max(t, h.last[key])
	if _, stored := h.enc[key]; !stored {
		sh, _ := keyShard(h.l, key)
		t = max(t, h.floor[sh])
	}
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
	lims := h.limitsOf(key)
	enc, stored := h.enc[key]
	// The limiter stores a key, and re-encodes its state, on every
	// decision that may consume, denied ones included (a cost above the
	// limit too): its instant becomes the key's latest.
	real := consume && n > 0
	want := h.decide(key, t, n, real, lims, enc)
	if real {
		h.last[key] = t
		if !stored {
			enc = make([]int, len(lims))
			h.enc[key] = enc
		}
		for k, lim := range lims {
			if lim > 0 || !stored {
				enc[k] = lim
			}
		}
	}
	// Durations from the caller's instant end where the model's do.
	want.ResetAfter += time.Duration(t - caller)
	if want.RetryAfter != 0 && want.RetryAfter != Never {
		want.RetryAfter += time.Duration(t - caller)
	}
	if boolOnly {
		got = Result{Allowed: got.Allowed, Limit: want.Limit, Remaining: want.Remaining, ResetAfter: want.ResetAfter, RetryAfter: want.RetryAfter, Window: want.Window}
	}
	if got != want {
		h.t.Fatalf("%v %v key %q t=%d (caller %d) n=%d consume=%v limits %v:\n got %+v\nwant %+v", h.alg, h.rates, key, t, caller, n, consume, lims, got, want)
	}
}

// setLimits gives key limits of its own, one per rate (SetLimit with one).
func (h *harness) setLimits(key string, lims []int) {
	var err error
	if len(lims) == 1 {
		err = h.l.SetLimit(key, lims[0])
	} else {
		err = h.l.SetLimits(key, lims...)
	}
	if err != nil {
		h.t.Fatal(err)
	}
	h.own[key] = lims
	enc, stored := h.enc[key]
	if !stored {
		enc = make([]int, len(lims))
		h.enc[key] = enc
		sh, _ := keyShard(h.l, key)
		h.last[key] = h.floor[sh] // a new key starts at its shard's floor
	}
	for k, lim := range lims {
		switch {
		case !stored:
			enc[k] = lim
			if lim == 0 {
				enc[k] = h.def[k]
			}
		case lim > 0 && enc[k] != lim:
			if enc[k] > 0 {
				h.m[k].relimit(key, h.last[key], enc[k], lim)
			}
			enc[k] = lim
		}
	}
}

// sweep sweeps the limiter at now: every key it evicts must have been
// idle, its model state that of a fresh key (the next decisions on it
// compare them), and never one with limits of its own; its shard's floor
// rises to now and the key's latest instant.
func (h *harness) sweep(now int64) {
	h.t.Helper()
	n := h.l.Sweep(time.Unix(0, now))
	gone := 0
	for key := range h.enc {
		sh, ok := keyShard(h.l, key)
		if ok {
			continue
		}
		if _, own := h.own[key]; own {
			h.t.Fatalf("%v %v: sweep at %d evicted key %q, which has limits of its own", h.alg, h.rates, now, key)
		}
		h.floor[sh] = max(h.floor[sh], now, h.last[key])
		delete(h.enc, key)
		delete(h.last, key)
		gone++
		h.swept++
	}
	if gone != n {
		h.t.Fatalf("%v %v: sweep at %d reported %d evictions, %d keys left", h.alg, h.rates, now, n, gone)
	}
}

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

func lookupKey[E any](tab *table[E], key string) (int, bool) {
	h := tab.hash(key)
	s := tab.shardFor(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := find(s, h, key)
	return int(h & tab.mask), ok
}

func (h *harness) clearLimit(key string) {
	if err := h.l.ClearLimit(key); err != nil {
		h.t.Fatal(err)
	}
	delete(h.own, key)
}

func (h *harness) setDefaults(lims []int) {
	var err error
	if len(lims) == 1 {
		err = h.l.SetDefaultLimit(lims[0])
	} else {
		err = h.l.SetDefaultLimits(lims...)
	}
	if err != nil {
		h.t.Fatal(err)
	}
	h.def = lims
}

// limitsFrom returns one limit in [0, 8] per rate drawn from b: rate 0's
// is b%9, as with one rate.
func (h *harness) limitsFrom(b uint8) []int {
	lims := make([]int, len(h.m))
	for k := range lims {
		lims[k] = int(b % 9)
		if k > 0 {
			lims[k] = int((uint32(b)*2654435761 + uint32(k)*40503) >> 16 % 9)
		}
	}
	return lims
}

// step runs one random operation drawn from r: a decision, a peek, a
// limit change or a sweep. One decision (or sweep) in four comes with an
// instant behind the clock, by up to two windows (gap's upper bits): a
// request read early, a stalled caller, a clock stepped back.
// The clock moves by fractions of the shortest window.
func (h *harness) step(op, key, gap, n, lim uint8, clock *int64) {
	*clock += int64(gap%64) * h.window / 64 / h.unit * h.unit
	now := *clock
	if op>>4&3 == 0 {
		now -= int64(gap>>2) * h.window / 32 / h.unit * h.unit
	}
	k := string('a' + rune(key%4))
	cost := int(n) % (slices.Max(h.limitsOf(k)) + 2)
	switch op % 16 {
	case 0:
		h.allow(k, now, cost, false)
	case 1:
		if lim%4 == 0 {
			h.setDefaults(h.limitsFrom(lim))
		} else {
			h.setLimits(k, h.limitsFrom(lim))
		}
	case 2:
		h.clearLimit(k)
	case 15:
		h.sweep(now)
	default:
		h.allow(k, now, cost, true)
	}
}

// modelConfigs are the configurations the models run: one rate (Limit and
// Window), then several (Config.Rates, not in window order, windows that
// divide each other and windows that do not, and one rate given as Rates).
// The fuzz target indexes them: new ones go at the end.
var modelConfigs = []struct {
	alg     Algorithm
	windows []time.Duration
	buckets int
	asRates bool // one rate given as Config.Rates
}{
	{FixedWindow, []time.Duration{time.Second}, 0, false},
	{FixedWindow, []time.Duration{7 * time.Second}, 0, false},
	{SlidingLog, []time.Duration{time.Second}, 0, false},
	{SlidingLog, []time.Duration{time.Minute}, 0, false},
	{SlidingCounter, []time.Duration{time.Second}, 10, false},
	{SlidingCounter, []time.Duration{3 * time.Second}, 3, false},
	{SlidingCounter, []time.Duration{time.Minute}, 1, false},
	{GCRA, []time.Duration{time.Second}, 0, false},
	{GCRA, []time.Duration{7 * time.Second}, 0, false},

	{FixedWindow, []time.Duration{time.Second, 3 * time.Second}, 0, false},
	{FixedWindow, []time.Duration{7 * time.Second, time.Second, time.Minute}, 0, false},
	{SlidingLog, []time.Duration{time.Second, 10 * time.Second}, 0, false},
	{SlidingLog, []time.Duration{time.Minute, time.Second, 7 * time.Second}, 0, false},
	{SlidingLog, []time.Duration{1500 * time.Millisecond, time.Second}, 0, false},
	{SlidingCounter, []time.Duration{1200 * time.Millisecond, 3 * time.Second}, 3, false},
	{SlidingCounter, []time.Duration{time.Second, 10 * time.Second, time.Minute}, 10, false},
	{SlidingCounter, []time.Duration{time.Minute, time.Second}, 1, false},
	{GCRA, []time.Duration{time.Second, 7 * time.Second}, 0, false},
	{GCRA, []time.Duration{3 * time.Second, time.Second, 10 * time.Second}, 0, false},
	{FixedWindow, []time.Duration{2 * time.Second}, 0, true},
	{SlidingLog, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 5 * time.Second}, 0, false},
	{GCRA, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 5 * time.Second}, 0, false},
	{FixedWindow, []time.Duration{3 * time.Second, time.Second, 5 * time.Second, 2 * time.Second}, 0, false},
	{SlidingCounter, []time.Duration{time.Second, 4 * time.Second, 3 * time.Second, 2 * time.Second}, 2, false},
}

// configName names a model configuration in subtests.
func configName(alg Algorithm, windows []time.Duration) string {
	name := alg.String()
	for _, w := range windows {
		name += "/" + w.String()
	}
	return name
}

// ratesOf returns windows with limits: lim(k) for rate k.
func ratesOf(windows []time.Duration, lim func(k int) int) []Rate {
	rates := make([]Rate, len(windows))
	for k, w := range windows {
		rates[k] = Rate{lim(k), w}
	}
	return rates
}

func TestAlgorithmsMatchReferenceModels(t *testing.T) {
	// One goroutine: the race detector finds nothing here and makes each
	// seed about ten times slower, so under it 5 seeds run (the test
	// command's run without it takes all 20).
	seeds := uint64(20)
	if raceEnabled {
		seeds = 5
	}
	for _, c := range modelConfigs {
		t.Run(configName(c.alg, c.windows), func(t *testing.T) {
			swept := 0
			defer func() { t.Logf("%d keys swept", swept) }()
			for seed := range seeds {
				rng := rand.New(rand.NewPCG(seed, uint64(c.alg)))
				h := newRatesHarness(t, c.alg, ratesOf(c.windows, func(int) int { return 1 + rng.IntN(8) }), c.buckets, c.asRates)
				clock := int64(t0Unix) * 1e9
				for range 2000 {
					h.step(uint8(rng.Uint32()), uint8(rng.Uint32()), uint8(rng.IntN(24)|rng.IntN(4)<<6), uint8(rng.Uint32()), uint8(rng.Uint32()), &clock)
				}
				swept += h.swept
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
	// Several rates: a burst the short window denies, a tier with other
	// numbers per window, a default change and a stale call.
	f.Add(uint8(9), uint8(0x53), []byte("\x03\x00\x00\x02\x00\x03\x00\x00\x05\x00\x01\x00\x00\x00\x17\x03\x00\x40\x01\x00\x04\x00\x08\x01\x00"))
	f.Add(uint8(12), uint8(0x97), []byte("\x03\x01\x00\x03\x00\x03\x01\x01\x03\x00\x01\x01\x00\x00\x26\x03\x01\x10\x01\x00\x00\x01\x20\x02\x00"))
	f.Add(uint8(17), uint8(0x64), []byte("\x03\x02\x00\x03\x00\x01\x00\x00\x00\x0c\x03\x02\x02\x01\x00\x03\x02\x30\x01\x00"))
	f.Fuzz(func(t *testing.T, cfg, limit uint8, ops []byte) {
		c := modelConfigs[int(cfg)%len(modelConfigs)]
		rates := ratesOf(c.windows, func(k int) int {
			if k == 0 {
				return int(limit % 10)
			}
			return int((uint32(limit)*2246822519 + uint32(k)*3266489917) >> 20 % 10)
		})
		h := newRatesHarness(t, c.alg, rates, c.buckets, c.asRates)
		clock := int64(t0Unix) * 1e9
		for i := 0; i+5 <= len(ops) && i < 5*500; i += 5 {
			h.step(ops[i], ops[i+1], ops[i+2], ops[i+3], ops[i+4], &clock)
		}
	})
}
