//go:build !race

package sync

import "testing"

// TestBirthsCheckAllocs: checking a reply of a key already held
// allocates nothing.
func TestBirthsCheckAllocs(t *testing.T) {
	b := newBirths(1, 16)
	lims := limitSet{10}
	d := birthReply(100, 5, 0, 1, 1, 1_000_000)
	b.check("k", 0, &d, &lims, 1, true)
	if a := testing.AllocsPerRun(1000, func() {
		d.at++
		b.check("k", 0, &d, &lims, 1, true)
	}); a != 0 {
		t.Errorf("check of a known key: %v allocations, want 0", a)
	}
}
