package bench

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
)

// Throttled adapts github.com/throttled/throttled/v2's GCRA rate limiter
// on its memstore without a key cap (a map from key to *int64 behind an
// RWMutex; a cap switches it to an LRU cache). Its API takes no instant:
// the store reads time.Now, or a function set once per store with
// SetTimeNow, which the accuracy report uses to replay traces.
type Throttled struct {
	rl  *throttled.GCRARateLimiterCtx
	ms  *memstore.MemStore
	now atomic.Int64 // Unix ns served by the store's clock in replay mode
}

// NewThrottled returns a GCRA limiter of p.Limit requests per p.Window
// with a burst of p.Limit (throttled's MaxBurst counts the requests beyond
// the first).
func NewThrottled(p Profile) (Keyed, error) {
	return newThrottled(p)
}

func newThrottled(p Profile) (*Throttled, error) {
	ms, err := memstore.New(0)
	if err != nil {
		return nil, err
	}
	rl, err := throttled.NewGCRARateLimiterCtx(throttled.WrapStoreWithContext(ms), throttled.RateQuota{
		MaxRate:  throttled.PerDuration(p.Limit, p.Window),
		MaxBurst: p.Limit - 1,
	})
	if err != nil {
		return nil, err
	}
	return &Throttled{rl: rl, ms: ms}, nil
}

// NewThrottledReplay returns a Throttled whose store reads the instant
// last passed to AllowAt instead of time.Now. It is meant for
// single-goroutine trace replays: the instant is one per store, not per
// call.
func NewThrottledReplay(p Profile) (*Throttled, error) {
	t, err := newThrottled(p)
	if err != nil {
		return nil, err
	}
	t.ms.SetTimeNow(func() time.Time { return time.Unix(0, t.now.Load()) })
	return t, nil
}

// Name returns "throttled".
func (t *Throttled) Name() string { return "throttled" }

// Allow calls RateLimitCtx with a quantity of 1.
func (t *Throttled) Allow(key string) bool {
	limited, _, err := t.rl.RateLimitCtx(context.Background(), key, 1)
	return err == nil && !limited
}

// AllowBytes is Allow for a []byte key, converted to a string.
func (t *Throttled) AllowBytes(key []byte) bool { return t.Allow(string(key)) }

// AllowAt sets the replay clock to now and calls Allow. Only a Throttled
// from NewThrottledReplay reads that clock.
func (t *Throttled) AllowAt(key string, now time.Time) bool {
	t.now.Store(now.UnixNano())
	return t.Allow(key)
}

// Close does nothing.
func (t *Throttled) Close() {}
