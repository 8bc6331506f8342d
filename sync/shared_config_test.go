package sync

import (
	"reflect"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
)

// TestSharedConfigMatchesTheRoots checks that a Shared limiter converts its
// Config as the root package's limiters do (one conversion serves both):
// the same fields back, defaults filled in the same way.
func TestSharedConfigMatchesTheRoots(t *testing.T) {
	clock := shardlimit.NewManualClock(T0)
	for _, cfg := range []shardlimit.Config{
		{Algorithm: shardlimit.SlidingCounter, Limit: 7, Window: time.Minute, Buckets: 6, Shards: 4,
			MaxKeys: 100, WhenFull: shardlimit.EvictLeastRecent, MaxKeyBytes: 64, JanitorInterval: -1, Clock: clock},
		{Algorithm: shardlimit.SlidingLog, Rates: []shardlimit.Rate{{Limit: 3, Window: time.Second}, {Limit: 50, Window: time.Hour}},
			JanitorInterval: 2 * time.Second, Clock: clock},
	} {
		s := newShared(t, newClient(t, "127.0.0.1:1"), SharedConfig{Config: cfg})
		local, err := shardlimit.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer local.Close()
		if got, want := s.Config(), local.Config(); !reflect.DeepEqual(got, want) {
			t.Errorf("%v: Shared's Config %+v, the root's %+v", cfg.Algorithm, got, want)
		}
	}
}
