//go:build !race

package sync

import (
	"testing"
	"time"
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
