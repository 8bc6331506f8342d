package main

import (
	"testing"
	"time"
)

// at returns the instant base + ms milliseconds.
func at(base time.Time, ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }

func instants(base time.Time, ms ...int) []int64 {
	ts := make([]int64, len(ms))
	for i, m := range ms {
		ts[i] = at(base, m).UnixNano()
	}
	return ts
}

func TestMaxAligned(t *testing.T) {
	base := time.Unix(1_000_000, 0) // a multiple of W = 1s
	w := time.Second
	// Windows [0,1s): 2, [1s,2s): 4, [2s,3s): 1.
	ts := instants(base, 100, 900, 1000, 1200, 1500, 1999, 2500)
	for _, tc := range []struct {
		from, to int // fault, ms
		want     int
		start    int // ms of the worst window
	}{
		{from: 100, to: 200, want: 2, start: 0},
		{from: 900, to: 1100, want: 4, start: 1000},
		{from: 2000, to: 2100, want: 1, start: 2000},
		{from: 100, to: 2100, want: 4, start: 1000},
		{from: 500, to: 1000, want: 2, start: 0}, // ends at the boundary: [1s,2s) not overlapped
	} {
		n, s := maxAligned(ts, w, span{at(base, tc.from), at(base, tc.to)})
		if n != tc.want || !s.Equal(at(base, tc.start)) {
			t.Errorf("fault [%d, %d) ms: got %d at %v, want %d at %d ms", tc.from, tc.to, n, s.Sub(base), tc.want, tc.start)
		}
	}
}

func TestMaxSliding(t *testing.T) {
	base := time.Unix(1_000_000, 0)
	w := time.Second
	ts := instants(base, 0, 500, 900, 1400, 1450, 3000)
	for _, tc := range []struct {
		from, to int
		want     int
	}{
		{from: 1000, to: 1100, want: 4}, // [500, 1500) holds 500, 900, 1400, 1450
		{from: 1600, to: 1700, want: 3}, // s > 600: [900, 1900)
		{from: 2500, to: 2600, want: 1}, // s in (1500, 2600): the latest holds 3000
		{from: 3000, to: 3001, want: 1},
	} {
		n, _ := maxSliding(ts, w, span{at(base, tc.from), at(base, tc.to)})
		if n != tc.want {
			t.Errorf("fault [%d, %d) ms: got %d, want %d", tc.from, tc.to, n, tc.want)
		}
	}
}

func TestMaxOutside(t *testing.T) {
	base := time.Unix(1_000_000, 0)
	w := time.Second
	ts := instants(base, 100, 200, 300, 2100, 2200, 2300, 2400, 4500)
	within := span{base, at(base, 6000)}
	fault := span{at(base, 2000), at(base, 2500)}
	if got := maxOutside(ts, w, true, within, fault); got != 3 {
		t.Errorf("aligned: got %d, want 3 (the fault's window [2s,3s) excluded)", got)
	}
	// Sliding windows must end by 2000 or start at 2500 or later.
	if got := maxOutside(ts, w, false, within, fault); got != 3 {
		t.Errorf("sliding: got %d, want 3", got)
	}
	if got := maxOutside(ts, w, false, within, span{at(base, 150), at(base, 160)}); got != 4 {
		t.Errorf("sliding, fault at 150 ms: got %d, want 4 ([1.5s, 2.5s))", got)
	}
}

func TestAffectedUntil(t *testing.T) {
	base := time.Unix(1_000_000, 0)
	r := &row{fs: base, fe: at(base, 1000), end: at(base, 9000)}
	if got := affectedUntil(r, [][]change{nil, nil}); !got.Equal(r.fe) {
		t.Errorf("no changes: %v, want the fault's end", got.Sub(base))
	}
	late := [][]change{{{at: at(base, 500), to: 1}, {at: at(base, 3000), to: 0}}, nil}
	if got := affectedUntil(r, late); !got.Equal(at(base, 3000)) {
		t.Errorf("late recovery: %v, want 3s", got.Sub(base))
	}
	stuck := [][]change{nil, {{at: at(base, 500), to: 1}}}
	if got := affectedUntil(r, stuck); !got.Equal(r.end) {
		t.Errorf("never recovered: %v, want the run's end", got.Sub(base))
	}
}
