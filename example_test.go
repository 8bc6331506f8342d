package shardlimit_test

import (
	"fmt"
	"time"

	"github.com/shardlimit/shardlimit"
)

// The seed scenario: 10 requests 100 ms before a window boundary and one
// more 200 ms later. Only the fixed window admits it.
func Example() {
	boundary := time.Unix(1_734_480_060, 0) // a multiple of one minute
	for _, alg := range []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingLog,
		shardlimit.SlidingCounter, shardlimit.GCRA} {
		l, err := shardlimit.New(shardlimit.Config{Algorithm: alg, Limit: 10, Window: time.Minute, Buckets: 60})
		if err != nil {
			panic(err)
		}
		l.AllowN("client-1", boundary.Add(-100*time.Millisecond), 10)
		r := l.AllowN("client-1", boundary.Add(100*time.Millisecond), 1)
		fmt.Printf("%-15s allowed=%-5v remaining=%d retry-after=%v\n", alg, r.Allowed, r.Remaining, r.RetryAfter)
		l.Close()
	}
	// Output:
	// fixed_window    allowed=true  remaining=9 retry-after=0s
	// sliding_log     allowed=false remaining=0 retry-after=59.8s
	// sliding_counter allowed=false remaining=0 retry-after=59s
	// gcra            allowed=false remaining=0 retry-after=5.8s
}

// Per-key limits: client tiers set at runtime, without losing history.
func ExampleLimiter_SetLimit() {
	l, _ := shardlimit.NewFixedWindow(shardlimit.Config{Limit: 10, Window: time.Minute})
	defer l.Close()
	now := time.Unix(1_734_480_000, 0)
	l.SetLimit("client-2", 20)
	for range 15 {
		l.AllowN("client-2", now, 1)
	}
	fmt.Println(l.AllowN("client-1", now, 1).Remaining, l.Peek("client-2", now, 0).Remaining)
	l.SetLimit("client-2", 10) // usage so far counts against the new limit
	r := l.AllowN("client-2", now, 1)
	fmt.Println(r.Allowed, r.Remaining, r.RetryAfter)
	// Output:
	// 9 5
	// false 0 1m0s
}

// A cost of n units, and what "never" looks like.
func ExampleLimiter_AllowN() {
	l, _ := shardlimit.NewGCRA(shardlimit.Config{Limit: 100, Window: time.Second})
	defer l.Close()
	now := time.Unix(1_734_480_000, 0)
	fmt.Println(l.AllowN("upload", now, 60).Remaining)
	r := l.AllowN("upload", now, 60)
	fmt.Println(r.Allowed, r.RetryAfter)
	r = l.AllowN("upload", now, 101)
	fmt.Println(r.Allowed, r.RetryAfter == shardlimit.Never)
	// Output:
	// 40
	// false 200ms
	// false true
}

// The []byte form does not allocate and never keeps the slice.
func ExampleLimiter_AllowBytesN() {
	l, _ := shardlimit.NewSlidingCounter(shardlimit.Config{Limit: 2, Window: time.Second})
	defer l.Close()
	key := []byte("203.0.113.7")
	now := time.Unix(1_734_480_000, 0)
	for range 3 {
		r := l.AllowBytesN(key, now, 1)
		fmt.Println(r.Allowed, r.Remaining)
	}
	// Output:
	// true 1
	// true 0
	// false 0
}

// AllowAt decides at a time the caller already has (here a request's
// arrival time), without a clock read and without building a Result.
func ExampleLimiter_AllowAt() {
	l, _ := shardlimit.NewFixedWindow(shardlimit.Config{Limit: 2, Window: time.Minute})
	defer l.Close()
	arrived := time.Unix(1_734_480_000, 0)
	for i := range 3 {
		fmt.Println(l.AllowAt("198.51.100.4", arrived.Add(time.Duration(i)*time.Second)))
	}
	fmt.Println(l.AllowAt("198.51.100.4", arrived.Add(time.Minute)))
	// Output:
	// true
	// true
	// false
	// true
}

// Several rates on one key: 3 per second and 10 per minute, all or
// nothing. The Result reports the binding rate; RetryAfter is the first
// instant every rate admits the request.
func ExampleConfig_rates() {
	l, _ := shardlimit.New(shardlimit.Config{
		Algorithm: shardlimit.FixedWindow,
		Rates: []shardlimit.Rate{
			{Limit: 3, Window: time.Second},
			{Limit: 10, Window: time.Minute},
		},
	})
	defer l.Close()
	start := time.Unix(1_734_480_000, 0)
	for s := range 4 {
		for range 4 {
			r := l.AllowN("client-1", start.Add(time.Duration(s)*time.Second), 1)
			fmt.Println(s, r.Allowed, r.Limit, r.Remaining, r.Window, r.RetryAfter)
		}
	}
	// Output:
	// 0 true 3 2 1s 0s
	// 0 true 3 1 1s 0s
	// 0 true 3 0 1s 0s
	// 0 false 3 0 1s 1s
	// 1 true 3 2 1s 0s
	// 1 true 3 1 1s 0s
	// 1 true 3 0 1s 0s
	// 1 false 3 0 1s 1s
	// 2 true 3 2 1s 0s
	// 2 true 3 1 1s 0s
	// 2 true 3 0 1s 0s
	// 2 false 3 0 1s 1s
	// 3 true 10 0 1m0s 0s
	// 3 false 10 0 1m0s 57s
	// 3 false 10 0 1m0s 57s
	// 3 false 10 0 1m0s 57s
}
