package bench

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// XTimeSyncMap is XTimeMutex with a sync.Map in place of the locked map,
// the other common hand-written form.
type XTimeSyncMap struct {
	m     sync.Map // string -> *rate.Limiter
	limit rate.Limit
	burst int
}

// NewXTimeSyncMap returns an XTimeSyncMap refilling p.Limit tokens per
// p.Window with a burst of p.Limit.
func NewXTimeSyncMap(p Profile) *XTimeSyncMap {
	return &XTimeSyncMap{
		limit: rate.Limit(float64(p.Limit) / p.Window.Seconds()),
		burst: p.Limit,
	}
}

// Name returns "xtime_syncmap".
func (x *XTimeSyncMap) Name() string { return "xtime_syncmap" }

// get returns key's bucket, creating it if needed.
func (x *XTimeSyncMap) get(key string) *rate.Limiter {
	if v, ok := x.m.Load(key); ok {
		return v.(*rate.Limiter)
	}
	v, _ := x.m.LoadOrStore(key, rate.NewLimiter(x.limit, x.burst))
	return v.(*rate.Limiter)
}

// Allow calls rate.Limiter.Allow on key's bucket.
func (x *XTimeSyncMap) Allow(key string) bool { return x.get(key).Allow() }

// AllowBytes is Allow for a []byte key, converted to a string.
func (x *XTimeSyncMap) AllowBytes(key []byte) bool { return x.get(string(key)).Allow() }

// AllowAt calls rate.Limiter.AllowN(now, 1) on key's bucket.
func (x *XTimeSyncMap) AllowAt(key string, now time.Time) bool {
	return x.get(key).AllowN(now, 1)
}

// AllowBytesAt is AllowAt for a []byte key, converted to a string.
func (x *XTimeSyncMap) AllowBytesAt(key []byte, now time.Time) bool {
	return x.get(string(key)).AllowN(now, 1)
}

// Close does nothing.
func (x *XTimeSyncMap) Close() {}
