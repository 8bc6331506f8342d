package sync

// While Degraded, FailOpen and FailClosed still validate the cost: a
// negative one is ErrInvalidCost, never admitted (found by review).

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
)

// downBackend is a store that never applies anything.
type downBackend struct{}

var errDown = errors.New("store down")

func (downBackend) Add(_ context.Context, items []Item, out []ItemResult) []ItemResult {
	out = out[:0]
	for range items {
		out = append(out, ItemResult{Outcome: NotApplied, Err: errDown})
	}
	return out
}

func (downBackend) Read(context.Context, string, int64, int, []int64) ([]int64, error) {
	return nil, errDown
}

func (downBackend) Time(context.Context) (time.Time, error) { return time.Time{}, errDown }

func TestSharedDegradedPolicyRejectsNegativeCost(t *testing.T) {
	for _, p := range []FailurePolicy{FailOpen, FailClosed} {
		t.Run(p.String(), func(t *testing.T) {
			s, err := NewShared(nil, SharedConfig{
				Config:        shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 5, Window: time.Minute},
				Backend:       downBackend{},
				Policy:        p,
				FlushInterval: time.Millisecond,
				FailAfter:     1,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			s.AllowN("k", time.Now(), 1)
			for deadline := time.Now().Add(5 * time.Second); s.State() != Degraded; {
				if time.Now().After(deadline) {
					t.Fatal("never degraded")
				}
				time.Sleep(time.Millisecond)
			}
			r := s.AllowN("k", time.Now(), -3)
			if !errors.Is(r.Err, shardlimit.ErrInvalidCost) || r.Allowed || r.Remaining > r.Limit {
				t.Errorf("AllowN(-3) while degraded under %v: %+v", p, r)
			}
		})
	}
}
