//go:build !race

package sync

import (
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
)

// TestJournalRecordAllocs: recording a known key allocates nothing.
func TestJournalRecordAllocs(t *testing.T) {
	j := testJournal(t, ratesCfg(shardlimit.GCRA, 0, rate(10, time.Minute)), 16)
	now := us(0)
	j.record("k", now, 1, false)
	if a := testing.AllocsPerRun(1000, func() { j.record("k", now, 1, false) }); a != 0 {
		t.Errorf("record of a known key: %v allocations, want 0", a)
	}
}
