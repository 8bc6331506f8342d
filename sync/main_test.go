package sync

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardlimit/shardlimit/internal/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(redistest.StopAtExit(m),
		// go-redis starts this prober when a pool has seen PoolSize dial
		// errors in a row (tests against 127.0.0.1:1); after Close it
		// notices the closed pool only when its 1 s sleep ends.
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
	)
}

// T0 is the origin of the tests' instants: a multiple of
// every window they use.
var T0 = time.Unix(1_734_480_000, 0)

// at returns T0 + d.
func at(d time.Duration) time.Time { return T0.Add(d) }

// sec returns s seconds (fractional) as a Duration, exactly for
// microsecond inputs such as 10.2 or 0.0005.
func sec(s float64) time.Duration {
	return time.Duration(math.Round(s*1e6)) * time.Microsecond
}

// newClient returns a go-redis client for addr with retries off and one dial
// attempt per command (see the package doc), closed by the test's cleanup.
func newClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		// Well above the 5 s newExact gives each call, like the socket
		// timeouts below: a dial is bounded by the call's context as well,
		// and at 1 s dials to the shared Redis timed out on a loaded
		// machine (two clones of the tests under -race beside three busy
		// loops), their calls decided by the fallback. A stopped server
		// refuses at once.
		DialTimeout:   10 * time.Second,
		DialerRetries: 1,
		// Well above the 5 s newExact gives each call: a socket deadline
		// is the earlier of the call's context deadline and this, and at
		// 2 s it cut short calls a loaded machine under -race made slow.
		ReadTimeout:  10 * time.Second,
		WriteTimeout: 10 * time.Second,
		PoolSize:     32,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// sharedClient returns a client of the shared test Redis.
func sharedClient(t testing.TB) *redis.Client {
	t.Helper()
	return newClient(t, redistest.RequireRedis(t))
}

// crc16 is Redis Cluster's key hash (CRC-16/XMODEM).
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// keySlot returns the Redis Cluster slot of a Redis key, hash tags
// included.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % 16384)
}
