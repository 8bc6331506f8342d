package bench

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// XTimeMutex is the keyed limiter most Go services write by hand: a map from
// key to *rate.Limiter (golang.org/x/time/rate, a token bucket) behind a
// sync.RWMutex, read-locked for keys already present. The map never shrinks:
// an application would add its own eviction.
type XTimeMutex struct {
	mu    sync.RWMutex
	m     map[string]*rate.Limiter
	limit rate.Limit
	burst int
}

// NewXTimeMutex returns an XTimeMutex refilling p.Limit tokens per p.Window
// with a burst of p.Limit.
func NewXTimeMutex(p Profile) *XTimeMutex {
	return &XTimeMutex{
		m:     make(map[string]*rate.Limiter),
		limit: rate.Limit(float64(p.Limit) / p.Window.Seconds()),
		burst: p.Limit,
	}
}

// Name returns "xtime_mutex".
func (x *XTimeMutex) Name() string { return "xtime_mutex" }

// get returns key's bucket, creating it if needed.
func (x *XTimeMutex) get(key string) *rate.Limiter {
	x.mu.RLock()
	l, ok := x.m[key]
	x.mu.RUnlock()
	if ok {
		return l
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if l, ok = x.m[key]; !ok {
		l = rate.NewLimiter(x.limit, x.burst)
		x.m[key] = l
	}
	return l
}

// getBytes is get for a []byte key: the lookup does not copy the key.
func (x *XTimeMutex) getBytes(key []byte) *rate.Limiter {
	x.mu.RLock()
	l, ok := x.m[string(key)]
	x.mu.RUnlock()
	if ok {
		return l
	}
	return x.get(string(key))
}

// Allow calls rate.Limiter.Allow on key's bucket.
func (x *XTimeMutex) Allow(key string) bool { return x.get(key).Allow() }

// AllowBytes is Allow for a []byte key, copying it only to insert it.
func (x *XTimeMutex) AllowBytes(key []byte) bool { return x.getBytes(key).Allow() }

// AllowAt calls rate.Limiter.AllowN(now, 1) on key's bucket.
func (x *XTimeMutex) AllowAt(key string, now time.Time) bool {
	return x.get(key).AllowN(now, 1)
}

// AllowBytesAt is AllowAt for a []byte key.
func (x *XTimeMutex) AllowBytesAt(key []byte, now time.Time) bool {
	return x.getBytes(key).AllowN(now, 1)
}

// Close does nothing.
func (x *XTimeMutex) Close() {}
