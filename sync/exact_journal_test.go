package sync

import (
	"fmt"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
)

// testJournal returns the journal of an Exact limiter of cfg, holding at
// most maxKeys keys.
func testJournal(t testing.TB, cfg shardlimit.Config, maxKeys int) *journal {
	t.Helper()
	e := &Exact{cfg: cfg}
	if err := e.setRates(); err != nil {
		t.Fatal(err)
	}
	return newJournal(cfg.Algorithm, e.rates, cfg.Buckets, maxKeys)
}

// us returns T0 + d in Unix microseconds.
func us(d time.Duration) int64 { return at(d).UnixMicro() }

// TestJournalCoalescesAndDrops: one entry per window (fixed window), per
// bucket (sliding counter), per quarter window (GCRA); what no longer
// counts is dropped and a full key merges its oldest entry into the next,
// never losing a unit.
func TestJournalCoalescesAndDrops(t *testing.T) {
	type step struct {
		at      time.Duration
		n       int
		pend    bool
		entries int   // after the step
		units   int64 // in the journal's entries at the step's instant
	}
	cases := []struct {
		name  string
		cfg   shardlimit.Config
		steps []step
	}{
		{"fixed", ratesCfg(shardlimit.FixedWindow, 0, rate(10, time.Minute)), []step{
			{time.Second, 2, false, 1, 2},
			{30 * time.Second, 3, true, 1, 5},   // same window
			{61 * time.Second, 1, true, 1, 1},   // the first window ended: dropped
			{121 * time.Second, 4, false, 1, 4}, // again
			{122 * time.Second, 1, false, 1, 5}, // same window
		}},
		{"counter", ratesCfg(shardlimit.SlidingCounter, 6, rate(10, time.Minute)), []step{
			{time.Second, 2, false, 1, 2},
			{11 * time.Second, 1, true, 2, 3},  // next bucket
			{21 * time.Second, 1, true, 3, 4},  // next
			{31 * time.Second, 1, true, 4, 5},  // four slots taken
			{41 * time.Second, 1, true, 4, 6},  // the oldest merged into the next
			{100 * time.Second, 1, true, 2, 2}, // buckets 1 to 3 left the window (bucket 0's units moved to 2)
		}},
		{"gcra", ratesCfg(shardlimit.GCRA, 0, rate(10, time.Minute)), []step{
			{0, 5, false, 1, 5},
			{12 * time.Second, 1, true, 1, 6},  // same quarter window
			{20 * time.Second, 1, true, 2, 7},  // the next
			{61 * time.Second, 0, false, 2, 7}, // the first entry's latest instant is 12 s
			{72 * time.Second, 0, false, 1, 1}, // a window after 12 s: dropped
			{80 * time.Second, 0, false, 0, 0}, // a window after 20 s
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := testJournal(t, c.cfg, 16)
			for i, s := range c.steps {
				if s.n > 0 && !j.record("k", us(s.at), s.n, s.pend) {
					t.Fatalf("step %d: not recorded", i)
				}
				sh := j.shard("k")
				sh.mu.Lock()
				units, entries := int64(0), 0
				if k := sh.m["k"]; k != nil {
					j.prune(k, us(s.at))
					entries = k.len
					for _, x := range k.e[:k.len] {
						units += x.n
					}
				}
				sh.mu.Unlock()
				if entries != s.entries || units != s.units {
					t.Errorf("step %d at %v: %d entries of %d units, want %d of %d", i, s.at, entries, units, s.entries, s.units)
				}
			}
		})
	}
}

// TestJournalTakeSettle: a replay takes the pending units (or all), and a
// failed one leaves them pending for the next; units recorded while a
// replay is in flight stay pending.
func TestJournalTakeSettle(t *testing.T) {
	j := testJournal(t, ratesCfg(shardlimit.FixedWindow, 0, rate(10, time.Minute)), 1024) // room for both keys whatever shard they hash to
	now := us(time.Second)
	j.record("a", now, 3, false)
	j.record("a", now, 2, true)
	j.record("b", now, 1, true)
	sum := func(cs []charge) (n int64) {
		for _, c := range cs {
			n += c.n
		}
		return n
	}
	if got := sum(j.take(nil, now, false)); got != 3 {
		t.Fatalf("pending taken: %d units, want 3", got)
	}
	j.record("b", now, 4, true) // during the replay
	j.settle(false)
	if got := sum(j.take(nil, now, false)); got != 7 {
		t.Fatalf("after a failed replay: %d pending, want 3 + 4", got)
	}
	j.settle(true)
	if got := sum(j.take(nil, now, false)); got != 0 {
		t.Fatalf("after a replay: %d pending, want 0", got)
	}
	j.settle(true)
	if got := sum(j.take(nil, now, true)); got != 10 {
		t.Fatalf("all: %d units, want 10", got)
	}
	j.settle(true)
	if got := sum(j.take(nil, us(2*time.Minute), true)); got != 0 || j.keys() != 0 {
		t.Fatalf("two windows on: %d units in %d keys, want none", got, j.keys())
	}
}

// TestJournalFull: a journal full of keys whose units count refuses a new
// key (the caller denies it or counts it), and takes one again once the
// others' units stop counting.
func TestJournalFull(t *testing.T) {
	j := testJournal(t, ratesCfg(shardlimit.FixedWindow, 0, rate(10, time.Minute)), journalShards)
	now := us(time.Second)
	refused := 0
	for i := range 4 * journalShards {
		if !j.record(fmt.Sprint("k", i), now, 1, true) {
			refused++
		}
	}
	if refused == 0 || j.keys() > journalShards || j.full.Load() != uint64(refused) {
		t.Fatalf("%d keys held, %d refused, full %d: want at most %d held", j.keys(), refused, j.full.Load(), journalShards)
	}
	if !j.record("fresh", us(2*time.Minute), 1, true) {
		t.Fatal("a window later, a new key refused: the others' units no longer count")
	}
}
