package sync

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// Errors keep their cause (issue 11, item 4): every state change and
// LastError wraps the package's sentinel for the kind of failure and the
// error that caused it; a reply that cannot be read is ErrBadReply and is
// reported, never silent.

// redisError returns the Redis error reply err wraps, or "".
func redisError(err error) string {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return rerr.Error()
	}
	return ""
}

// outOfMemory starts a private Redis with the noeviction policy and a
// maxmemory below what it already holds, so it refuses every write with
// OOM (and answers reads).
func outOfMemory(t *testing.T) *redistest.Server {
	t.Helper()
	srv := redistest.StartServer(t, "--maxmemory-policy", "noeviction")
	c := newClient(t, srv.Addr)
	ctx := ctxT(t, 10*time.Second)
	pipe := c.Pipeline()
	for i := range 500 {
		pipe.Set(ctx, fmt.Sprintf("filler:%d", i), strings.Repeat("x", 1000), 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := redistest.Do(srv.Addr, "CONFIG", "SET", "maxmemory", "100kb"); err != nil {
		t.Fatal(err)
	}
	return srv
}

// TestSharedErrorsKeepCause: for each fault, the change to Degraded and
// SharedStats.LastError wrap the sentinel of its kind and its cause.
func TestSharedErrorsKeepCause(t *testing.T) {
	type fault struct {
		client func(t *testing.T) RedisClient
		check  func(err error) bool
	}
	faults := map[string]fault{
		"refused": {
			client: func(t *testing.T) RedisClient { return newClient(t, "127.0.0.1:1") },
			check: func(err error) bool {
				return errors.Is(err, ErrUnavailable) && errors.Is(err, syscall.ECONNREFUSED)
			},
		},
		"out of memory": {
			client: func(t *testing.T) RedisClient { return newClient(t, outOfMemory(t).Addr) },
			check: func(err error) bool {
				return errors.Is(err, ErrRejected) && strings.HasPrefix(redisError(err), "OOM ")
			},
		},
		"wrong type": {
			client: func(t *testing.T) RedisClient {
				srv := redistest.StartServer(t)
				// The counter key of "k" in window 0 of a 1 min window
				// at T0, under the prefix the test sets, is a string.
				key := "p:{k}:sh:" + fmt.Sprint(at(time.Second).UnixNano()/int64(time.Minute))
				if _, err := redistest.Do(srv.Addr, "SET", key, "1"); err != nil {
					t.Fatal(err)
				}
				return newClient(t, srv.Addr)
			},
			check: func(err error) bool {
				return errors.Is(err, ErrRejected) && strings.HasPrefix(redisError(err), "WRONGTYPE ")
			},
		},
		"bad reply": {
			client: func(t *testing.T) RedisClient {
				f := redistest.StartFake(t, func(args []string) []byte {
					if strings.EqualFold(args[0], "evalsha") || strings.EqualFold(args[0], "eval") {
						return []byte("+OK\r\n")
					}
					return nil
				})
				return newClient(t, f.Addr)
			},
			check: func(err error) bool { return errors.Is(err, ErrBadReply) },
		},
	}
	for name, f := range faults {
		t.Run(name, func(t *testing.T) {
			ch := newChanges()
			s := newShared(t, f.client(t), SharedConfig{
				Config:        shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 10, Window: time.Minute},
				Prefix:        "p:",
				FlushInterval: 5 * time.Millisecond, FlushTimeout: time.Second, FailAfter: 1,
				OnStateChange: ch.record,
			})
			s.AllowN("k", at(time.Second), 1)
			c := ch.wait(t, Degraded, 10*time.Second)
			st := s.SharedStats()
			t.Logf("state change: %v; last error: %v", c.Err, st.LastError)
			if !f.check(c.Err) {
				t.Errorf("state change error %v does not wrap the sentinel and cause", c.Err)
			}
			if !f.check(st.LastError) {
				t.Errorf("LastError %v does not wrap the sentinel and cause", st.LastError)
			}
			if name == "bad reply" && st.BadReplies == 0 {
				t.Errorf("stats %+v: no bad reply counted", st)
			}
		})
	}
}

// TestExactErrorsKeepCause: error replies and unreadable replies are
// decided by the fallback without degrading the limiter, and each is
// counted and kept in ExactStats.LastError with its sentinel and cause.
func TestExactErrorsKeepCause(t *testing.T) {
	cases := []struct {
		reply string
		check func(err error) bool
	}{
		{"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n", func(err error) bool {
			return errors.Is(err, ErrRejected) && strings.HasPrefix(redisError(err), "WRONGTYPE ")
		}},
		{"-OOM command not allowed when used memory > 'maxmemory'.\r\n", func(err error) bool {
			return errors.Is(err, ErrRejected) && strings.HasPrefix(redisError(err), "OOM ")
		}},
		{"+OK\r\n", func(err error) bool { return errors.Is(err, ErrBadReply) }},
		{":-5\r\n", func(err error) bool { return errors.Is(err, ErrBadReply) }},
		{"*3\r\n:1\r\n:1\r\n:1\r\n", func(err error) bool { return errors.Is(err, ErrBadReply) }},
		{"*5\r\n:1\r\n:1\r\n:-5\r\n:0\r\n:1\r\n", func(err error) bool { return errors.Is(err, ErrBadReply) }},
	}
	for _, tc := range cases {
		t.Run(strings.TrimSpace(tc.reply), func(t *testing.T) {
			f := redistest.StartFake(t, func(args []string) []byte {
				if strings.EqualFold(args[0], "evalsha") || strings.EqualFold(args[0], "eval") {
					return []byte(tc.reply)
				}
				return nil
			})
			e := newExact(t, newClient(t, f.Addr), ExactConfig{Config: fixedCfg(1, time.Minute)})
			now := time.Now()
			if r := e.AllowN("k", now, 1); !r.Allowed || r.Err != nil {
				t.Fatalf("first call: %+v, want the fallback's admission", r)
			}
			if r := e.AllowN("k", now, 1); r.Allowed {
				t.Fatalf("second call: %+v, want the fallback's denial", r)
			}
			st := e.ExactStats()
			t.Logf("last error: %v", st.LastError)
			if st.State != Healthy || st.Errors != 2 || !tc.check(st.LastError) {
				t.Fatalf("stats %+v", st)
			}
			if bad := errors.Is(st.LastError, ErrBadReply); bad != (st.BadReplies == 2) {
				t.Fatalf("stats %+v: bad replies miscounted", st)
			}
		})
	}
	t.Run("refused", func(t *testing.T) {
		ch := newChanges()
		e := newExact(t, newClient(t, "127.0.0.1:1"), ExactConfig{Config: fixedCfg(1, time.Minute),
			Timeout: time.Second, DegradeAfter: time.Nanosecond, ProbeInterval: 10 * time.Millisecond, OnStateChange: ch.record})
		for range 3 {
			e.AllowN("k", time.Now(), 1)
		}
		c := ch.wait(t, Degraded, 10*time.Second)
		if !errors.Is(c.Err, ErrUnavailable) || !errors.Is(c.Err, syscall.ECONNREFUSED) {
			t.Fatalf("state change %+v", c)
		}
		if err := e.ExactStats().LastError; !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("LastError %v", err)
		}
	})
}
