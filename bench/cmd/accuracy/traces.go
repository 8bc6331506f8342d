package main

import (
	"math"
	"math/rand/v2"
	"sort"
)

// request is one request of a trace: an instant (Unix ns) and a key index.
type request struct {
	t   int64
	key int32
}

// trace is a sequence of requests in time order over a set of keys.
type trace struct {
	name string
	desc string
	keys int
	reqs []request
}

// params shape the traces: limit requests per window (ns) from base (Unix
// ns, aligned to the window), over windows windows.
type params struct {
	limit   int
	window  int64
	base    int64
	windows int
	keys    int
}

// poisson appends to reqs the arrivals of a Poisson process of rate
// requests per window on key over [from, to).
func poisson(rng *rand.Rand, reqs []request, key int32, rate float64, window, from, to int64) []request {
	mean := float64(window) / rate
	t := float64(from)
	for {
		t += rng.ExpFloat64() * mean
		if int64(t) >= to {
			return reqs
		}
		reqs = append(reqs, request{t: int64(t), key: key})
	}
}

// uniform appends n requests on key at instants drawn uniformly in
// [from, to), sorted.
func uniform(rng *rand.Rand, reqs []request, key int32, n int, from, to int64) []request {
	start := len(reqs)
	for range n {
		reqs = append(reqs, request{t: from + rng.Int64N(to-from), key: key})
	}
	sortReqs(reqs[start:])
	return reqs
}

func sortReqs(reqs []request) {
	sort.SliceStable(reqs, func(i, j int) bool { return reqs[i].t < reqs[j].t })
}

// traces returns the traces of the report, drawn from seed.
func traces(p params, seed uint64) []trace {
	rng := rand.New(rand.NewPCG(seed, 0xacc))
	L, W := float64(p.limit), p.window
	end := p.base + int64(p.windows)*W
	var ts []trace

	ts = append(ts, trace{
		name: "steady Poisson",
		desc: "one key, Poisson arrivals at 1.2x the limit",
		keys: 1,
		reqs: poisson(rng, nil, 0, 1.2*L, W, p.base, end),
	})

	// Bursts of 2L requests within W/20, starting at Poisson instants of
	// mean gap 2W: the average rate is the limit, the peaks twice it.
	var bursts []request
	for t := p.base; ; {
		t += int64(rng.ExpFloat64() * float64(2*W))
		if t+W/20 >= end {
			break
		}
		bursts = uniform(rng, bursts, 0, 2*p.limit, t, t+W/20)
	}
	sortReqs(bursts)
	ts = append(ts, trace{
		name: "bursts",
		desc: "one key, bursts of 2x the limit within W/20, one every 2W on average",
		keys: 1,
		reqs: bursts,
	})

	// The attacker knows windows are aligned to Unix time: every third
	// window boundary b it sends the limit in [b-W/50, b) and again in
	// [b, b+W/50).
	var attack []request
	for b := p.base + W; b+W/50 < end; b += 3 * W {
		attack = uniform(rng, attack, 0, p.limit, b-W/50, b)
		attack = uniform(rng, attack, 0, p.limit, b, b+W/50)
	}
	ts = append(ts, trace{
		name: "boundary attacker",
		desc: "one key, the limit just before and again just after every third window boundary",
		keys: 1,
		reqs: attack,
	})

	ts = append(ts, trace{
		name: "flood from idle",
		desc: "one idle key, then Poisson arrivals at 3x the limit",
		keys: 1,
		reqs: poisson(rng, nil, 0, 3*L, W, p.base, end),
	})

	// Zipf: the busiest key gets 3x the limit, the long tail far less.
	const s = 1.1
	var h float64
	for k := 1; k <= p.keys; k++ {
		h += math.Pow(float64(k), -s)
	}
	total := 3 * L * h // requests per window, so that key 0 gets 3L
	z := rand.NewZipf(rng, s, 1, uint64(p.keys-1))
	var zipf []request
	for _, r := range poisson(rng, nil, 0, total, W, p.base, end) {
		r.key = int32(z.Uint64())
		zipf = append(zipf, r)
	}
	ts = append(ts, trace{
		name: "Zipf keys",
		desc: "many keys, Zipf(1.1) popularity, the busiest at 3x the limit",
		keys: p.keys,
		reqs: zipf,
	})
	return ts
}
