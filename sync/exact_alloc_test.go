//go:build !race

package sync

import (
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
)

// TestExactDenyCacheAllocs: a decision the deny cache answers allocates
// nothing.
func TestExactDenyCacheAllocs(t *testing.T) {
	e := replay(t, fixedCfg(1, time.Hour))
	e.AllowN("k", at(0), 1)
	if r := e.AllowN("k", at(time.Second), 1); r.Allowed {
		t.Fatalf("over the limit: %+v", r)
	}
	now := at(2 * time.Second)
	if a := testing.AllocsPerRun(1000, func() { e.AllowN("k", now, 1) }); a != 0 {
		t.Errorf("a cached denial: %v allocations, want 0", a)
	}
	if st := e.ExactStats(); st.DenyCacheHits < 1000 {
		t.Fatalf("the cache answered %d decisions", st.DenyCacheHits)
	}
}

// exactRoundTripAllocs is the most a decision by Redis of one rate may
// allocate, the go-redis client's share included (21 measured with
// go-redis v9.23 and a limit of 1,000; 20 when the reply's integers are
// smaller, go-redis boxing every one above 255: redis_rate/v10 allocates
// 22, see bench/syncbench's BenchmarkSyncRoundTrip). Each further rate
// adds up to exactRateAllocs, all of them go-redis's: it boxes the rate's
// state key and the integers of its part of the reply.
const (
	exactRoundTripAllocs = 21
	exactRateAllocs      = 4
)

// TestExactRoundTripAllocs: a decision by Redis allocates at most
// exactRoundTripAllocs (plus exactRateAllocs per further rate), with
// limits that do not fit the runtime's preallocated small integers.
func TestExactRoundTripAllocs(t *testing.T) {
	for _, cfg := range []ExactConfig{
		{Config: gcraCfg(1000, time.Hour)},
		{Config: ratesCfg(shardlimit.SlidingCounter, 10, rate(1000, time.Minute), rate(100000, time.Hour))},
	} {
		e := newExact(t, sharedClient(t), cfg)
		e.Allow("k") // loads the script
		if a := testing.AllocsPerRun(200, func() {
			if !e.Allow("k") {
				t.Fatal("denied")
			}
		}); a > float64(exactRoundTripAllocs+exactRateAllocs*(len(e.rates)-1)) {
			t.Errorf("%v, %d rates: a decision by Redis allocated %v times, want at most %d + %d per further rate", cfg.Algorithm, len(e.rates), a, exactRoundTripAllocs, exactRateAllocs)
		}
	}
}
