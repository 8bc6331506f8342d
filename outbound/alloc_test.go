//go:build !race

package outbound

import (
	"testing"
	"time"
)

// TestTransportAllowedPathAllocatesNothing guards the allowed path: with
// or without holds of other keys, waiting or failing fast, Transport adds
// no allocation to its base's.
func TestTransportAllowedPathAllocatesNothing(t *testing.T) {
	for _, failFast := range []bool{false, true} {
		_, tr, req := allowedPath(t, failFast)
		if n := testing.AllocsPerRun(100, func() { _, _ = tr.RoundTrip(req) }); n != 0 {
			t.Errorf("failFast %v: %v allocations per request, want 0", failFast, n)
		}
		_ = tr.(*Transport).pacer.HoldFor("other", time.Hour)
		if n := testing.AllocsPerRun(100, func() { _, _ = tr.RoundTrip(req) }); n != 0 {
			t.Errorf("failFast %v, another key held: %v allocations per request, want 0", failFast, n)
		}
	}
}
