// Package shardlimit decides, in a few tens of nanoseconds and without a
// network round trip, whether a request from a client may proceed.
//
// A limiter admits at most Limit requests (or cost units) per Window for
// each key (an API key, an IP address, a user, a client and route). Four
// algorithms share one interface, Limiter, so switching is a one-word change:
//
//   - FixedWindow: a counter per window aligned to Unix time; cheapest, but a
//     client may consume the limit twice around a window boundary.
//   - SlidingLog: the timestamps of the last window's admitted units in a
//     ring buffer of capacity limit; exact.
//   - SlidingCounter: the window split into buckets, the oldest weighted by
//     its overlap; O(1) memory, error about one bucket's share for steady
//     traffic (bursts timed at bucket edges can reach twice the limit).
//   - GCRA: the generic cell rate algorithm, a smooth token bucket in O(1)
//     state (as in x/time/rate, redis_rate and throttled).
//
// Keys are hashed with XXH3 (xxHash, seeded per limiter) into a
// power-of-two number of lock-striped shards. Each shard keeps its keys in
// pointer-free storage (an open-addressing table whose positions hold the
// short keys and the fixed-size records themselves, and an arena for long
// keys), so a million keys cost the garbage collector almost nothing; a key
// is compared in full on lookup, so two keys never share a budget. A
// janitor, one goroutine for all the limiters of a process, evicts keys
// whose state equals a fresh key's.
//
// The API follows golang.org/x/time/rate: Allow(key) reads the limiter's
// Clock, AllowN(key, now, n) takes the instant explicitly, and both have
// []byte twins that do not allocate. AllowN returns a Result by value with
// the limit, the remaining units and the exact reset and retry delays, from
// which HTTP middleware (packages fasthttpmw and httpmw) sets the usual
// rate-limit headers. Two more spellings of the same decisions are faster
// than what they abbreviate, so they stay: AllowAt(key, now) is
// AllowN(key, now, 1).Allowed without computing a Result, and
// AllowNow(key, n) is AllowN at the limiter's Clock without building a
// time.Time (the Limiter's method docs name the benchmarks). Package sync
// shares approximate cluster-wide limits through Redis without a round
// trip per request.
//
// Per key, time never goes back: an instant earlier than the latest one a
// key has seen is decided at that latest instant (durations still measured
// from the caller's now), so requests read early, concurrent callers and
// clocks set back never admit more than the limit. Instants from
// time.Now() are placed by their monotonic clock reading, so wall-clock
// steps never reach a limiter.
//
// All limiters are safe for concurrent use. Call Close when done with one:
// the janitor then forgets it, and its goroutine ends with the last
// limiter.
//
//	l, err := shardlimit.New(shardlimit.Config{
//		Algorithm: shardlimit.SlidingLog,
//		Limit:     10,
//		Window:    time.Minute,
//	})
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer l.Close()
//	if !l.Allow("client-1") {
//		// answer 429
//	}
package shardlimit
