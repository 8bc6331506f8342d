package bench

import "time"

// Keyed is the face every benchmarked limiter shows: a per-key decision for
// one request, reading the limiter's own clock.
type Keyed interface {
	// Name is the limiter's name in benchmark and report output.
	Name() string
	// Allow reports whether one request for key may happen now, consuming
	// it if so. An error inside the limiter reads as false.
	Allow(key string) bool
	// AllowBytes is Allow for a []byte key. Limiters without a []byte API
	// convert it to a string, as an application would have to.
	AllowBytes(key []byte) bool
	// Close releases the limiter's goroutines and connections, if any.
	Close()
}

// AtKeyed is implemented by limiters whose API takes the instant of the
// decision explicitly, as golang.org/x/time/rate's AllowN does.
type AtKeyed interface {
	Keyed
	// AllowAt reports whether one request for key may happen at now.
	AllowAt(key string, now time.Time) bool
	// AllowBytesAt is AllowAt for a []byte key.
	AllowBytesAt(key []byte, now time.Time) bool
}

// Stepper is implemented by AtKeyed limiters that cannot stay on the
// allowed path with a fixed instant: shardlimit's sliding log keeps one
// timestamp per admitted request, so its limit cannot be made large enough
// for a billion requests at one instant. Benchmarks with an explicit now
// advance it by Step for each call a goroutine makes, multiplied by the
// number of goroutines sharing a key.
type Stepper interface {
	// Step is the least advance of now per call that keeps a key on the
	// allowed path; 0 means a fixed now is fine.
	Step() time.Duration
}

// Profile is a limit every limiter is configured to, as Limit requests per
// Window and a burst of Limit where the algorithm has one.
type Profile struct {
	// Name is "allowed" or "denied".
	Name string
	// Limit is the number of requests admitted per Window.
	Limit int
	// Window is the period of the limit.
	Window time.Duration
}

// The two profiles of the benchmarks.
var (
	// Allowed has a limit no benchmark reaches, so it measures the path
	// that admits: a billion requests per hour, the whole of it as burst.
	// shardlimit's sliding log, whose state grows with its limit, uses
	// AllowedLog instead.
	Allowed = Profile{Name: "allowed", Limit: 1_000_000_000, Window: time.Hour}
	// AllowedLog is the allowed profile of shardlimit's sliding log: 2^20
	// requests per 10 ms (a hundred million per second), which no single
	// key reaches in a benchmark either, at 4 MiB of ring for a hot key.
	AllowedLog = Profile{Name: "allowed", Limit: 1 << 20, Window: 10 * time.Millisecond}
	// Denied admits one request per hour: after the first request for a
	// key every decision denies, which measures the path that refuses.
	Denied = Profile{Name: "denied", Limit: 1, Window: time.Hour}
)

// Factory builds one limiter configured to a profile.
type Factory struct {
	// Name is the limiter's name (Keyed.Name of what New returns).
	Name string
	// Ours reports whether the limiter is one of shardlimit's.
	Ours bool
	// New builds the limiter. It fails only when a dependency such as
	// Redis is unavailable or the profile cannot be expressed.
	New func(p Profile) (Keyed, error)
}

// Factories returns every limiter of the comparison: shardlimit's four
// algorithms first, then the peers, Redis-backed ones last.
func Factories() []Factory {
	return append(OurFactories(), PeerFactories()...)
}

// PeerFactories returns the peers, Redis-backed ones last.
func PeerFactories() []Factory {
	return []Factory{
		{Name: "xtime_mutex", New: func(p Profile) (Keyed, error) { return NewXTimeMutex(p), nil }},
		{Name: "xtime_syncmap", New: func(p Profile) (Keyed, error) { return NewXTimeSyncMap(p), nil }},
		{Name: "sethvargo", New: NewSethvargo},
		{Name: "ulule", New: NewUlule},
		{Name: "httprate", New: func(p Profile) (Keyed, error) { return NewHTTPRate(p), nil }},
		{Name: "throttled", New: NewThrottled},
		{Name: "redis_rate", New: NewRedisRate},
	}
}
