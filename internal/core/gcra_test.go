package core

import (
	"testing"
	"time"
)

// Tests of GCRA.

// GCRA keeps a key's usage when its limit is lowered and raised again, as
// long as the debt at the lowered limit fits maxDebt (20 years); the README
// documents the cap.
func TestGCRALowerRaiseKeepsUsage(t *testing.T) {
	l := mustNew(t, Config{Algorithm: GCRA, Limit: 1_000_000, Window: time.Hour})
	if r := l.AllowN("k", at(0), 1_000_000); !r.Allowed {
		t.Fatal(r)
	}
	// 1,000 is the smallest limit whose debt (1,000 hours) fits.
	if err := l.SetLimit("k", 1000); err != nil {
		t.Fatal(err)
	}
	if err := l.SetLimit("k", 1_000_000); err != nil {
		t.Fatal(err)
	}
	if r := l.Peek("k", at(1), 0); r.Remaining > 1000 {
		t.Errorf("1 s after spending the whole limit, remaining %d of 1,000,000", r.Remaining)
	}
	// Lowered to 1, the debt would be 114 years: it is capped at 20, so
	// raising the limit again restores 20 years' worth at the old rate.
	l.SetLimit("k", 1)
	l.SetLimit("k", 1_000_000)
	if r := l.Peek("k", at(1), 0); r.Remaining < 800_000 || r.Remaining > 830_000 {
		t.Errorf("capped debt: remaining %d", r.Remaining)
	}
}
