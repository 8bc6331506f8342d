package sync

import (
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// scanAll feeds stream to a fresh scanner with bound max, whole and then
// split at every byte, and returns the errors of both ways.
func scanAll(max int64, stream string) (whole, split error) {
	s := respScanner{max: max}
	whole = s.scan([]byte(stream))
	s = respScanner{max: max}
	for i := range len(stream) {
		if split = s.scan([]byte(stream[i : i+1])); split != nil {
			break
		}
	}
	return whole, split
}

// TestRespScanner: well-formed replies of every RESP2 and RESP3 type pass,
// back to back, each within the bound; headers that declare more than the
// bound, nest too deep or break the syntax fail with ErrBadReply, whether
// the bytes come at once or one by one.
func TestRespScanner(t *testing.T) {
	good := []string{
		"+OK\r\n", "-ERR x\r\n", ":1\r\n", ":-5\r\n", "$3\r\nabc\r\n", "$0\r\n\r\n", "$-1\r\n", "*-1\r\n", "*0\r\n",
		"*2\r\n$1\r\na\r\n:2\r\n", "*2\r\n*1\r\n:1\r\n*0\r\n", "%1\r\n+a\r\n:1\r\n", "~2\r\n:1\r\n:2\r\n",
		"_\r\n", ",1.5\r\n", "#t\r\n", "(12345678901234567890\r\n", "=8\r\ntxt:abcd\r\n", "!3\r\nerr\r\n",
		"|1\r\n+key\r\n+val\r\n+OK\r\n", ">2\r\n+message\r\n$1\r\nx\r\n",
		strings.Repeat("*1\r\n", maxReplyDepth) + ":1\r\n",
	}
	// Each reply alone, and all of them as one stream with a bound that
	// fits the largest: the bound is per reply.
	for _, g := range good {
		if w, s := scanAll(3000, g); w != nil || s != nil {
			t.Errorf("%q: %v, %v", g, w, s)
		}
	}
	if w, s := scanAll(3000, strings.Repeat(strings.Join(good, ""), 50)); w != nil || s != nil {
		t.Errorf("the replies back to back: %v, %v", w, s)
	}
	// The largest reply of this package: the totals of a sliding counter
	// of MaxBuckets buckets, each as large as a counter gets.
	var b strings.Builder
	b.WriteString("*" + strconv.Itoa(MaxSpan+1) + "\r\n")
	for range MaxSpan + 1 {
		b.WriteString(":4294967295\r\n")
	}
	if w, s := scanAll(DefaultMaxReplyBytes, b.String()); w != nil || s != nil {
		t.Errorf("%d totals: %v, %v", MaxSpan+1, w, s)
	}

	bad := []string{
		"*2147483647\r\n", "$2147483647\r\n", "%1073741824\r\n", "*9999999999999999999\r\n",
		"*40\r\n", "$995\r\n", // over the bound of 1000
		"+" + strings.Repeat("x", 1000) + "\r\n", "+" + strings.Repeat("x", 2000), // a line that never ends
		"*-5\r\n", "$-2\r\n", "?x\r\n", "*1x\r\n", "*\r\n", "$3\r\rabc\r\n", "*1\r\n:1\r\n\r\n",
	}
	// Nested one level too deep, within a byte bound of 3000.
	bad = append(bad, strings.Repeat("*1\r\n", maxReplyDepth+1)+":1\r\n")
	for i, x := range bad {
		max := int64(1000)
		if i == len(bad)-1 {
			max = 3000
		}
		w, s := scanAll(max, x)
		if !errors.Is(w, ErrBadReply) || !errors.Is(s, ErrBadReply) {
			t.Errorf("%.40q: %v, %v; want ErrBadReply", x, w, s)
		}
	}
}

// limitedClient returns a client of addr whose replies are bounded by
// LimitReplies.
func limitedClient(t *testing.T, addr string, maxBytes int) *redis.Client {
	t.Helper()
	opt := &redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1,
		ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second}
	opt.Dialer = LimitReplies(redis.NewDialer(opt), maxBytes)
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// heapGrowth runs f and returns how much the heap in use grew.
func heapGrowth(f func()) int64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc)
}

// TestLimitRepliesHostileStore: a store answering headers that declare
// gigabytes (the fake server) makes neither Exact nor Shared allocate them
// when the client dials through LimitReplies: each reply is ErrBadReply,
// reported, and decided by the fallback (Exact) or counted unknown
// (Shared). Without the bound go-redis allocates 32 GiB for the first.
func TestLimitRepliesHostileStore(t *testing.T) {
	for _, reply := range []string{"*2147483647\r\n", "$2147483647\r\n", "%1073741824\r\n", strings.Repeat("*1\r\n", 100000)} {
		t.Run(reply[:min(len(reply), 14)], func(t *testing.T) {
			f := redistest.StartFake(t, func(args []string) []byte {
				if strings.EqualFold(args[0], "evalsha") || strings.EqualFold(args[0], "eval") {
					return []byte(reply)
				}
				return nil
			})
			c := limitedClient(t, f.Addr, 0)
			e := newExact(t, c, ExactConfig{Config: fixedCfg(1, time.Minute)})
			s := newShared(t, c, SharedConfig{Config: shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 10, Window: time.Minute}})
			grew := heapGrowth(func() {
				if r := e.AllowN("k", time.Now(), 1); !r.Allowed || r.Err != nil {
					t.Errorf("Exact: %+v, want the fallback's admission", r)
				}
				s.AllowN("k", at(time.Second), 1)
				if err := s.Flush(ctxT(t, 5*time.Second)); !errors.Is(err, ErrBadReply) {
					t.Errorf("Shared flush: %v, want ErrBadReply", err)
				}
			})
			if est := e.ExactStats(); est.BadReplies != 1 || !errors.Is(est.LastError, ErrBadReply) {
				t.Errorf("Exact stats %+v", est)
			}
			if sst := s.SharedStats(); sst.BadReplies != 1 || sst.UnknownUnits != 1 || !errors.Is(sst.LastError, ErrBadReply) {
				t.Errorf("Shared stats %+v", sst)
			}
			t.Logf("heap grew by %d bytes; last error %v", grew, e.ExactStats().LastError)
			if grew > 2*DefaultMaxReplyBytes {
				t.Errorf("heap grew by %d bytes, more than twice the bound", grew)
			}
		})
	}
}

// TestLimitRepliesKeepsHealthCheck: go-redis checks a pooled connection
// before reusing it (a peek at its socket) only if the connection exposes
// its file descriptor; LimitReplies' connections do, so a connection the
// server closed while idle is replaced, not used for a command that fails.
func TestLimitRepliesKeepsHealthCheck(t *testing.T) {
	srv := redistest.StartServer(t)
	c := limitedClient(t, srv.Addr, 0)
	ctx := ctxT(t, 10*time.Second)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := redistest.Do(srv.Addr, "CLIENT", "KILL", "TYPE", "normal"); err != nil {
		t.Fatal(err)
	}
	// The kill reaches the pooled connection's socket at once on loopback.
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING on a pool whose connection the server closed: %v", err)
	}
}

// TestLimitRepliesNegative: a negative bound is a configuration error,
// reported by every dial, never a panic.
func TestLimitRepliesNegative(t *testing.T) {
	c := limitedClient(t, redistest.RequireRedis(t), -1)
	if err := c.Ping(ctxT(t, 5*time.Second)).Err(); !errors.Is(err, shardlimit.ErrInvalidConfig) {
		t.Fatalf("PING through a dialer with a negative bound: %v", err)
	}
}
