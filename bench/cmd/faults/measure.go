package main

import (
	"slices"
	"time"
)

// span is a half-open interval of time [from, to).
type span struct{ from, to time.Time }

// admitted returns the sorted instants (Unix ns) of the admitted
// decisions.
func admitted(ds []decision) []int64 {
	var ts []int64
	for _, d := range ds {
		if d.allowed {
			ts = append(ts, d.at.UnixNano())
		}
	}
	slices.Sort(ts)
	return ts
}

// countIn returns how many of the sorted ts lie in [from, to).
func countIn(ts []int64, from, to int64) int {
	lo, _ := slices.BinarySearch(ts, from)
	hi, _ := slices.BinarySearch(ts, to)
	return hi - lo
}

// maxAligned returns the most of the sorted ts in one aligned window
// [kW, (k+1)W) of Unix time among those that overlap fault, and the start
// of that window.
func maxAligned(ts []int64, w time.Duration, fault span) (int, time.Time) {
	wn := int64(w)
	best, at := -1, int64(0)
	for k := fault.from.UnixNano() / wn; k*wn < fault.to.UnixNano(); k++ {
		if n := countIn(ts, k*wn, (k+1)*wn); n > best {
			best, at = n, k*wn
		}
	}
	return max(best, 0), time.Unix(0, at)
}

// maxSliding returns the most of the sorted ts in one interval [s, s+W)
// that overlaps fault (fault.from - W < s < fault.to), and that s. The
// best s is an admission instant, the earliest or the latest s allowed.
func maxSliding(ts []int64, w time.Duration, fault span) (int, time.Time) {
	wn := int64(w)
	lo, hi := fault.from.UnixNano()-wn, fault.to.UnixNano()
	best, at := -1, int64(0)
	try := func(s int64) {
		if n := countIn(ts, s, s+wn); n > best {
			best, at = n, s
		}
	}
	try(lo + 1)
	try(hi - 1)
	for _, t := range ts {
		if t > lo && t < hi {
			try(t)
		}
	}
	return best, time.Unix(0, at)
}

// maxOutside returns the most of the sorted ts in one window that lies
// within within and does not overlap fault: aligned windows [kW, (k+1)W),
// or any [s, s+W).
func maxOutside(ts []int64, w time.Duration, aligned bool, within, fault span) int {
	wn := int64(w)
	from, to := within.from.UnixNano(), within.to.UnixNano()
	fs, fe := fault.from.UnixNano(), fault.to.UnixNano()
	clear := func(s int64) bool { return s >= from && s+wn <= to && (s+wn <= fs || s >= fe) }
	best := 0
	if aligned {
		for k := (from + wn - 1) / wn; (k+1)*wn <= to; k++ {
			if clear(k * wn) {
				best = max(best, countIn(ts, k*wn, (k+1)*wn))
			}
		}
		return best
	}
	for _, s := range append([]int64{from, fs - wn, fe, to - wn}, ts...) {
		if clear(s) {
			best = max(best, countIn(ts, s, s+wn))
		}
	}
	return best
}
