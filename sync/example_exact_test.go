package sync_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardlimit/shardlimit"
	shardsync "github.com/shardlimit/shardlimit/sync"
)

// Every process sharing the Redis shares one exact limit of 100 requests
// per minute per key; while Redis is unreachable each process falls back to
// a local limit of 25 (for four processes).
func ExampleNewExact() {
	opt := &redis.Options{
		Addr:                  "127.0.0.1:6379",
		MaxRetries:            -1,   // never re-send a script whose reply was lost
		ContextTimeoutEnabled: true, // end abandoned calls at their deadline
		DialerRetries:         1,    // report a refused connection at once
	}
	opt.Dialer = shardsync.LimitReplies(redis.NewDialer(opt), 0) // bound every reply
	client := redis.NewClient(opt)
	defer client.Close()

	cfg := shardlimit.Config{Algorithm: shardlimit.SlidingCounter, Limit: 100, Window: time.Minute}
	local := cfg
	local.Limit = 25
	fallback, err := shardlimit.New(local)
	if err != nil {
		panic(err)
	}
	defer fallback.Close()

	l, err := shardsync.NewExact(client, shardsync.ExactConfig{
		Config:   cfg,
		Timeout:  20 * time.Millisecond,
		Fallback: fallback,
		OnStateChange: func(c shardsync.StateChange) {
			fmt.Println("redis:", c.From, "->", c.To, c.Err)
		},
	})
	if err != nil {
		panic(err)
	}
	defer l.Close()

	if r := l.AllowN("user:42", time.Now(), 1); !r.Allowed {
		fmt.Println("429, retry in", r.RetryAfter)
	}
}

// A reconciler flushes units admitted locally and reads back the cluster's
// totals: one atomic script per item, all in one pipeline.
func ExampleRedisBackend_Add() {
	opt := &redis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1}
	opt.Dialer = shardsync.LimitReplies(redis.NewDialer(opt), 0)
	client := redis.NewClient(opt)
	defer client.Close()
	b, err := shardsync.NewRedisBackend(client, "")
	if err != nil {
		panic(err)
	}
	window := time.Minute
	id := time.Now().UnixNano() / int64(window)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	items := []shardsync.Item{
		{Key: "user:42", ID: id, Delta: 3, TTL: window + time.Second},
		{Key: "user:43", ID: id, Delta: 1, TTL: window + time.Second},
	}
	for i, r := range b.Add(ctx, items, nil) {
		switch r.Outcome {
		case shardsync.Applied:
			fmt.Println(items[i].Key, "cluster total", r.Total)
		case shardsync.NotApplied:
			// provably not counted: safe to send again in the next flush
		default:
			// maybe counted: do not resend; a later Floor heals a loss
		}
	}
}
