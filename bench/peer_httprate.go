package bench

import (
	"math"
	"sync"
	"time"

	"github.com/go-chi/httprate"
)

// HTTPRate drives github.com/go-chi/httprate's in-memory LimitCounter the
// way its RateLimiter.OnLimit does, without the HTTP parts: a sliding window
// counter over the current and the previous fixed window, the estimate
// rounded, read and incremented under one mutex. The counter keys its maps
// by the 64-bit hash of the key alone, so it stores no key bytes (and two
// keys with one hash share a budget). Windows here are aligned to Unix time;
// httprate's own middleware offsets them by its start instant.
type HTTPRate struct {
	mu     sync.Mutex
	c      httprate.LimitCounter
	limit  int
	window time.Duration
}

// NewHTTPRate returns an HTTPRate of p.Limit requests per p.Window.
func NewHTTPRate(p Profile) *HTTPRate {
	c := httprate.NewLocalLimitCounter(p.Window)
	c.Config(p.Limit, p.Window)
	return &HTTPRate{c: c, limit: p.Limit, window: p.Window}
}

// Name returns "httprate".
func (h *HTTPRate) Name() string { return "httprate" }

// Allow is AllowAt(key, time.Now()).
func (h *HTTPRate) Allow(key string) bool { return h.AllowAt(key, time.Now()) }

// AllowBytes is Allow for a []byte key, converted to a string.
func (h *HTTPRate) AllowBytes(key []byte) bool { return h.AllowAt(string(key), time.Now()) }

// AllowAt decides as httprate's RateLimiter.OnLimit does at instant now.
func (h *HTTPRate) AllowAt(key string, now time.Time) bool {
	now = now.UTC()
	cur := now.Truncate(h.window)
	prev := cur.Add(-h.window)
	h.mu.Lock()
	defer h.mu.Unlock()
	curN, prevN, err := h.c.Get(key, cur, prev)
	if err != nil {
		return false
	}
	w := float64(h.window)
	rate := int(math.Round(float64(prevN)*(w-float64(now.Sub(cur)))/w + float64(curN)))
	if rate+1 > h.limit {
		return false
	}
	return h.c.IncrementBy(key, cur, 1) == nil
}

// AllowBytesAt is AllowAt for a []byte key, converted to a string.
func (h *HTTPRate) AllowBytesAt(key []byte, now time.Time) bool {
	return h.AllowAt(string(key), now)
}

// Close does nothing.
func (h *HTTPRate) Close() {}
