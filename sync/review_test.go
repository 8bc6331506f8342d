package sync

// Three bugs found by code review (issue 11, item 8), each with the test
// that showed it.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
)

// extraBackend applies every item and answers one result more than it was
// given items: a Backend breaking its contract.
type extraBackend struct{}

func (extraBackend) Add(_ context.Context, items []Item, out []ItemResult) []ItemResult {
	out = out[:0]
	for range len(items) + 1 {
		out = append(out, ItemResult{Outcome: Applied, Total: 1, Totals: []int64{1}})
	}
	return out
}

func (extraBackend) Read(context.Context, string, int64, int, []int64) ([]int64, error) {
	return nil, errDown
}

func (extraBackend) Time(context.Context) (time.Time, error) { return time.Now(), nil }

// TestSharedBackendWithExtraResults: a Backend that returns more results
// than items does not panic the reconciler; the flush fails with
// ErrBadReply and the items' units are unknown (healed by the next floor),
// never counted as applied.
func TestSharedBackendWithExtraResults(t *testing.T) {
	s := newShared(t, nil, SharedConfig{
		Config:  shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 10, Window: time.Minute},
		Backend: extraBackend{},
	})
	s.AllowN("k", at(time.Second), 3)
	err := s.Flush(ctxT(t, 5*time.Second))
	if !errors.Is(err, ErrBadReply) {
		t.Fatalf("Flush: %v, want ErrBadReply", err)
	}
	if st := s.SharedStats(); st.SentUnits != 0 || st.UnknownUnits != 3 || st.ItemErrors != 1 {
		t.Fatalf("stats %+v, want the 3 units unknown", st)
	}
}

// TestSharedShutdownExpiredCountsDropped: a Shutdown whose context has
// already ended cannot send the pending units; they are counted dropped,
// not retried (nothing will retry them).
func TestSharedShutdownExpiredCountsDropped(t *testing.T) {
	s, err := NewShared(sharedClient(t), SharedConfig{
		Config:        shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 10, Window: time.Minute, Clock: shardlimit.NewManualClock(at(time.Second))},
		FlushInterval: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.AllowN("k", at(time.Second), 3)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown: %v, want context.Canceled", err)
	}
	if st := s.SharedStats(); st.RetriedUnits != 0 || st.DroppedUnits != 3 {
		t.Fatalf("stats %+v, want 0 retried and 3 dropped", st)
	}
}

// TestExactFixedRetryAfterStepBack: after the Redis server's clock steps
// back into an earlier window, the fixed window keeps counting the later
// window, and a denial's RetryAfter reaches that window's end: retrying
// then is admitted, retrying a moment earlier is not.
func TestExactFixedRetryAfterStepBack(t *testing.T) {
	e := replay(t, fixedCfg(2, time.Minute))
	for range 2 {
		if !e.AllowN("k", at(61*time.Second), 1).Allowed { // window [60 s, 120 s)
			t.Fatal("denied before the step")
		}
	}
	now := at(30 * time.Second) // stepped back 31 s, into window [0, 60 s)
	r := e.AllowN("k", now, 1)
	if r.Allowed || r.Err != nil {
		t.Fatalf("after the step: %+v", r)
	}
	if want := 90 * time.Second; r.RetryAfter != want || r.ResetAfter != want {
		t.Fatalf("after the step: %+v, want RetryAfter and ResetAfter %v (the end of the counted window)", r, want)
	}
	if r := e.AllowN("k", now.Add(r.RetryAfter-time.Microsecond), 1); r.Allowed {
		t.Fatalf("admitted before RetryAfter: %+v", r)
	}
	if r := e.AllowN("k", now.Add(r.RetryAfter), 1); !r.Allowed {
		t.Fatalf("denied at RetryAfter: %+v", r)
	}
}
