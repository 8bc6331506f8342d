package sync_test

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardlimit/shardlimit"
	shardsync "github.com/shardlimit/shardlimit/sync"
)

// Every process sharing the Redis shares two limits per key, 10 requests
// per second and 300 per hour, each through counters of its own; a request
// either limit denies consumes from neither. While Redis is unreachable each
// of four processes falls back to a quarter of each limit.
func ExampleNewShared_rates() {
	opt := &redis.Options{
		Addr:                  "127.0.0.1:6379",
		MaxRetries:            -1,   // never re-send a script whose reply was lost
		ContextTimeoutEnabled: true, // end abandoned calls at their deadline
		DialerRetries:         1,    // report a refused connection at once
	}
	opt.Dialer = shardsync.LimitReplies(redis.NewDialer(opt), 0) // bound every reply
	client := redis.NewClient(opt)
	defer client.Close()

	l, err := shardsync.NewShared(client, shardsync.SharedConfig{
		Config: shardlimit.Config{Algorithm: shardlimit.SlidingCounter, Rates: []shardlimit.Rate{
			{Limit: 10, Window: time.Second},
			{Limit: 300, Window: time.Hour},
		}},
		FallbackLimits: []int{3, 75},
	})
	if err != nil {
		panic(err)
	}
	defer l.Close() // flushes once, stops the reconciler

	if r := l.AllowN("user:42", time.Now(), 1); !r.Allowed {
		fmt.Println("429: over", r.Limit, "per", r.Window, "- retry in", r.RetryAfter)
	}
}
