package shardlimit

import (
	"testing"

	"github.com/shardlimit/shardlimit/internal/core"
)

// TestLimitsAreTheCoresLimits: the limits and defaults, written out in this
// package for its docs, are the ones internal/core enforces.
func TestLimitsAreTheCoresLimits(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"MaxLimit", MaxLimit, core.MaxLimit},
		{"MaxSlidingLogLimit", MaxSlidingLogLimit, core.MaxSlidingLogLimit},
		{"MaxWindow", int64(MaxWindow), int64(core.MaxWindow)},
		{"MaxKeyBytesLimit", MaxKeyBytesLimit, core.MaxKeyBytesLimit},
		{"MinJanitorInterval", int64(MinJanitorInterval), int64(core.MinJanitorInterval)},
		{"MaxShards", MaxShards, core.MaxShards},
		{"MaxBuckets", MaxBuckets, core.MaxBuckets},
		{"MaxRates", MaxRates, core.MaxRates},
		{"DefaultBuckets", DefaultBuckets, core.DefaultBuckets},
		{"DefaultMaxKeyBytes", DefaultMaxKeyBytes, core.DefaultMaxKeyBytes},
		{"Never", int64(Never), int64(core.Never)},
		{"RejectNewKeys", int64(RejectNewKeys), int64(core.RejectNewKeys)},
		{"EvictLeastRecent", int64(EvictLeastRecent), int64(core.EvictLeastRecent)},
		{"FixedWindow", int64(FixedWindow), int64(core.FixedWindow)},
		{"SlidingLog", int64(SlidingLog), int64(core.SlidingLog)},
		{"SlidingCounter", int64(SlidingCounter), int64(core.SlidingCounter)},
		{"GCRA", int64(GCRA), int64(core.GCRA)},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d here, %d in internal/core", c.name, c.got, c.want)
		}
	}
}
