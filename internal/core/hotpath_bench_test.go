package core

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkHotPath: one hot key of each algorithm, local (New) and shared
// (NewSynced, with other nodes' units in its buckets), through AllowN
// (a Result), AllowAt (a bool) and AllowN over the limit (Denied), with one
// rate and with two. Deterministic enough to compare instruction counts
// as well as times: one goroutine, a fixed instant but for the sliding
// log, which runs in steady state (1000 per minute, now advancing 60 ms
// per call, so each call expires one timestamp and stores one). Under
// valgrind --tool=callgrind, run the test binary with GOGC=off
// GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off (valgrind
// executes neither RDTSCP nor Go's preemption signals) and subtract a
// short run (-test.benchtime 2000x) from a long one to cancel the setup.
func BenchmarkHotPath(b *testing.B) {
	for _, alg := range []Algorithm{FixedWindow, SlidingLog, SlidingCounter, GCRA} {
		for _, shared := range []bool{false, true} {
			if shared && alg == GCRA {
				continue
			}
			for _, rates := range []int{1, 2} {
				for _, form := range []string{"AllowN", "AllowAt", "Denied"} {
					name := fmt.Sprintf("%v/shared=%v/rates=%d/%s", alg, shared, rates, form)
					b.Run(name, func(b *testing.B) {
						benchHotPath(b, hotPathCase{alg, shared, rates, form})
					})
				}
			}
		}
	}
}

type hotPathCase struct {
	alg    Algorithm
	shared bool
	rates  int
	form   string
}

const hotKey = "192.0.2.1"

// hotNow is the benchmarks' fixed instant.
var hotNow = time.Unix(1_734_480_000, 0)

func benchHotPath(b *testing.B, c hotPathCase) {
	limit, step := MaxLimit, time.Duration(0)
	if c.alg == SlidingLog {
		limit, step = 1000, time.Minute/1000
	}
	if c.form == "Denied" {
		limit, step = 100, 0
	}
	rates := []Rate{{limit, time.Minute}, {limit, time.Second}}[:c.rates]
	cfg := Config{Algorithm: c.alg, Rates: rates, JanitorInterval: -1}
	var l Limiter
	var err error
	if c.shared {
		var y Synced
		y, err = NewSynced(cfg)
		l = y
		if err == nil {
			hotRemote(y, limit, c.form == "Denied")
		}
	} else {
		l, err = New(cfg)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	now := hotNow
	if c.form == "Denied" {
		l.AllowN(hotKey, now, 100)
	}
	for range 1000 {
		l.AllowN(hotKey, now, 1)
		now = now.Add(step)
	}
	want := c.form != "Denied"
	b.ReportAllocs()
	if c.form == "AllowAt" {
		for b.Loop() {
			if !l.AllowAt(hotKey, now) {
				b.Fatal("denied")
			}
			now = now.Add(step)
		}
		return
	}
	for b.Loop() {
		if l.AllowN(hotKey, now, 1).Allowed != want {
			b.Fatal("unexpected verdict")
		}
		now = now.Add(step)
	}
}

// hotRemote gives the hot key of a shared limiter other nodes' units in
// every bucket of every rate: a few, or, for a key that is to be denied,
// half its limit in the newest bucket. (The sliding log's steady state
// moves on a window during the warm-up: its other nodes' units are gone
// before it is measured, but its buckets still move.)
func hotRemote(y Synced, limit int, deny bool) {
	y.(Limiter).AllowN(hotKey, hotNow, 1) // stores the key
	for i := range y.Shards() {
		for _, f := range y.Collect(i, nil) {
			totals := make([]int64, len(f.Deltas))
			for b := range totals {
				totals[b] = int64(min(limit/100, 3) + b%2)
			}
			if deny {
				totals[len(totals)-1] = int64(limit / 2)
			}
			y.Apply(&f, totals)
		}
	}
}
