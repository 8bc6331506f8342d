package core

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

// Reference models: naive, obviously correct implementations of the four
// algorithms with exact arithmetic (math/big where a product could
// overflow), checked against the fast ones on random sequences and by a
// fuzz target (the harness in model_test.go). Instants are Unix
// nanoseconds. The harness also feeds the limiter instants behind a key's
// latest; the models see them raised to the key's running maximum (the
// time rule), and the limiter's durations, measured from the caller's
// instant, end where the model's do. A limiter of several rates is
// modelled by one model per rate (see harness).

type model interface {
	// decide decides n units for key at t under limit lim, the key's state
	// being encoded for limit enc (0: none); a state re-encoded for lim is
	// kept only when consume.
	decide(key string, t int64, n int, consume bool, lim, enc int) Result
	// relimit re-encodes key's state from old to lim at once (SetLimit),
	// relative to the key's latest instant last.
	relimit(key string, last int64, old, lim int)
	// forget drops key's state: the key was evicted.
	forget(key string)
	// settle settles a decision of key by op (see Limiter.Settle).
	settle(key string, op settleOp)
}

// settleOp is one Settle of a key as each rate's model sees it.
type settleOp struct {
	at, last int64 // the decision's instant as the caller gave it; the key's latest
	delta    int
	enc      int // the limit the rate's state is encoded for (0: none)
}

func (m *fixedModel) settle(key string, op settleOp) {
	id := op.last / m.w
	if op.delta > 0 {
		if m.win[key] != id {
			m.win[key], m.count[key] = id, 0
		}
		m.count[key] += op.delta
		return
	}
	if m.win[key] == id && op.at/m.w == id {
		m.count[key] -= min(-op.delta, m.count[key])
	}
}

// room returns how many units a charge of key at last may add before
// it overdraws, under limit lim of this model's window, the longest: its
// ring holds at most twice the limit, an overdraft's excess counted in.
func (m *logModel) room(key string, last int64, lim int) int {
	live := 0
	for _, s := range m.units[key] {
		if last < s+m.w {
			live++
		}
	}
	return max(0, 2*lim-live)
}

// settle: a charge adds its units at the key's latest instant (the
// harness moves them all if the ring has no room for them: see
// harness.overdraw), every one of them, whatever the ring's room; a
// refund removes units of the caller's instant exactly.
func (m *logModel) settle(key string, op settleOp) {
	u := m.units[key]
	if op.delta > 0 {
		at := op.last // stamped as the newest, if later (see decide)
		if len(u) > 0 {
			at = max(at, u[len(u)-1])
		}
		for range op.delta {
			u = append(u, at)
		}
		m.units[key] = u
		return
	}
	out := u[:0:0]
	left := -op.delta
	for _, s := range u {
		if s == op.at && left > 0 {
			left--
			continue
		}
		out = append(out, s)
	}
	m.units[key] = out
}

func (m *counterModel) settle(key string, op settleOp) {
	b := m.buckets[key]
	if b == nil {
		b = map[int64]int{}
		m.buckets[key] = b
	}
	j := op.last / m.g
	if op.delta > 0 {
		b[j] += op.delta
		return
	}
	if ja := op.at / m.g; ja <= j && ja >= j-m.n {
		b[ja] -= min(-op.delta, b[ja])
	}
}

// settle: a charge moves the TAT by delta emission intervals from the
// latest instant at least; a refund moves it back by the units less the
// time the bucket drained since the caller's instant, never below the
// latest.
func (m *gcraModel) settle(key string, op settleOp) {
	if op.enc == 0 {
		return
	}
	last := new(big.Rat).SetInt64(op.last)
	tat := m.tat[key]
	if op.delta > 0 {
		if tat == nil || tat.Cmp(last) < 0 {
			tat = last
		}
		m.tat[key] = new(big.Rat).Add(tat, big.NewRat(int64(op.delta)*m.w, int64(op.enc)))
		return
	}
	// A refund (the harness makes no reservations: the latest units count
	// at the key's latest instant): the TAT moves back by the units less
	// the time from the caller's instant to the latest, never before it.
	if tat == nil || tat.Cmp(last) <= 0 {
		return
	}
	back := new(big.Rat).Sub(big.NewRat(-int64(op.delta)*m.w, int64(op.enc)), big.NewRat(op.last-min(op.at, op.last), 1))
	if back.Sign() <= 0 {
		return
	}
	nt := new(big.Rat).Sub(tat, back)
	if nt.Cmp(last) < 0 {
		nt = last
	}
	m.tat[key] = nt
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

func (m *fixedModel) forget(key string) { delete(m.win, key); delete(m.count, key) }

// logModel: every admitted unit's exact instant.
type logModel struct {
	w     int64
	units map[string][]int64 // ascending
}

func (m *logModel) decide(key string, t int64, n int, consume bool, lim, _ int) Result {
	var live []int64
	for _, s := range m.units[key] {
		if t < s+m.w { // a unit stamped after t (see overdraw) counts too
			live = append(live, s)
		}
	}
	at := t // the instant the units are stamped at: the newest, if later
	if len(live) > 0 {
		at = max(at, live[len(live)-1])
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
			live = append(live, at)
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

func (m *logModel) forget(key string) { delete(m.units, key) }

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

func (m *counterModel) forget(key string) { delete(m.buckets, key) }

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

func (m *gcraModel) forget(key string) { delete(m.tat, key) }

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

// modelConfigs are the configurations the models run: one rate (Limit and
// Window), then several (Config.Rates, not in window order, windows that
// divide each other and windows that do not, and one rate given as Rates).
// The fuzz target indexes them: new ones go at the end.
type modelConfig struct {
	alg     Algorithm
	windows []time.Duration
	buckets int
	asRates bool // one rate given as Config.Rates
}

var modelConfigs = []modelConfig{
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

// TestBigLimitsMatchReferenceModels runs keys of one rate and of three with limits near
// MaxLimit (MaxSlidingLogLimit for the log) over windows the limits do not
// divide, costs up to half of MaxLimit, limits changing to any value (GCRA
// re-encoding debts of a billion units, then refunding them), against the
// reference models: no count or remainder overflows or borrows wrongly.
func TestBigLimitsMatchReferenceModels(t *testing.T) {
	for _, alg := range allAlgorithms {
		for _, nrates := range []int{1, 3} {
			t.Run(fmt.Sprint(alg, "/", nrates, "_rates"), func(t *testing.T) {
				rates := []Rate{{1_000_000_007, 7 * time.Second}, {999_999_937, 13 * time.Second}, {MaxLimit, 3 * time.Second}}
				buckets := 0
				switch alg {
				case SlidingLog:
					rates = []Rate{{MaxSlidingLogLimit - 7, 7 * time.Second}, {MaxSlidingLogLimit - 77, 13 * time.Second}, {MaxSlidingLogLimit, 3 * time.Second}}
				case SlidingCounter:
					buckets = 13
					for i := range rates {
						rates[i].Window *= 13
					}
				}
				for seed := range uint64(10) {
					rng := rand.New(rand.NewPCG(seed, uint64(alg)))
					h := newRatesHarness(t, alg, rates[:nrates], buckets, false)
					clock := int64(t0Unix)*1e9 + rng.Int64N(1e9)
					for range 300 {
						clock += rng.Int64N(int64(2 * time.Second))
						now := clock
						if rng.IntN(4) == 0 {
							now -= rng.Int64N(int64(5 * time.Second))
						}
						now = now / h.unit * h.unit // the models keep exact stamps
						n := rng.IntN(MaxLimit/2) + rng.IntN(3)
						if alg == SlidingLog {
							n = rng.IntN(3) // one stamp per unit
						}
						key := string(rune('a' + rng.IntN(2)))
						switch rng.IntN(8) {
						case 0:
							h.allow(key, now, n, false)
						case 1:
							if alg == SlidingLog {
								continue
							}
							lims := []int{rng.IntN(MaxLimit + 1), rng.IntN(MaxLimit + 1), 1 + rng.IntN(MaxLimit)}[:nrates]
							if rng.IntN(2) == 0 {
								h.setDefaults(lims)
							} else {
								h.setLimits(key, lims)
							}
						default:
							h.allow(key, now, n, true)
						}
					}
				}
			})
		}
	}
}
