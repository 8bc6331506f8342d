package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// RedisAddr is the Redis server redis_rate runs against: $BENCH_REDIS_ADDR,
// default 127.0.0.1:6379.
var RedisAddr = func() string {
	if a := os.Getenv("BENCH_REDIS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}()

// RedisKeyPrefix is prepended to every key sent to Redis, so the
// benchmark's keys are easy to tell apart from anyone else's.
const RedisKeyPrefix = "shardlimit-bench:"

// ErrNoRedis is wrapped by the error of RedisClient and NewRedisRate when
// Redis does not answer; benchmarks skip redis_rate then.
var ErrNoRedis = errors.New("bench: redis not answering")

var redisOnce struct {
	sync.Once
	c   *redis.Client
	err error
}

// RedisClient returns the process's Redis client, or an error if Redis does
// not answer PING within a second.
func RedisClient() (*redis.Client, error) {
	redisOnce.Do(func() {
		c := redis.NewClient(&redis.Options{Addr: RedisAddr})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := c.Ping(ctx).Err(); err != nil {
			_ = c.Close()
			redisOnce.err = fmt.Errorf("%w at %s: %w", ErrNoRedis, RedisAddr, err)
			return
		}
		redisOnce.c = c
	})
	return redisOnce.c, redisOnce.err
}

// RedisRate adapts github.com/go-redis/redis_rate/v10: GCRA in a Lua
// script on the Redis server, one round trip per decision. The instant is
// the Redis server's TIME, so no explicit instant can be passed.
type RedisRate struct {
	l     *redis_rate.Limiter
	limit redis_rate.Limit
}

// NewRedisRate returns a redis_rate limiter of p.Limit requests per
// p.Window with a burst of p.Limit, or an error if Redis does not answer.
func NewRedisRate(p Profile) (Keyed, error) {
	c, err := RedisClient()
	if err != nil {
		return nil, err
	}
	return &RedisRate{
		l:     redis_rate.NewLimiter(c),
		limit: redis_rate.Limit{Rate: p.Limit, Burst: p.Limit, Period: p.Window},
	}, nil
}

// Name returns "redis_rate".
func (r *RedisRate) Name() string { return "redis_rate" }

// Allow calls redis_rate's Limiter.Allow on RedisKeyPrefix+key.
func (r *RedisRate) Allow(key string) bool {
	res, err := r.l.Allow(context.Background(), RedisKeyPrefix+key, r.limit)
	return err == nil && res.Allowed > 0
}

// AllowBytes is Allow for a []byte key, converted to a string.
func (r *RedisRate) AllowBytes(key []byte) bool { return r.Allow(string(key)) }

// Reset forgets key's state in Redis.
func (r *RedisRate) Reset(key string) error {
	return r.l.Reset(context.Background(), RedisKeyPrefix+key)
}

// Close does nothing: the Redis client is shared by the process.
func (r *RedisRate) Close() {}
