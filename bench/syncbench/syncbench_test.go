package syncbench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
	shardsync "github.com/shardlimit/shardlimit/sync"
)

// The limits: high enough that no benchmark is ever denied (each checks).
const (
	limit  = 1 << 29
	window = time.Minute
)

// flushInterval is Shared's flush interval in every benchmark.
const flushInterval = 50 * time.Millisecond

// newClient returns a go-redis client of the private server with the
// options package sync recommends, closed by b's cleanup. If count is not
// nil it counts the commands and round trips the client makes.
func newClient(b *testing.B, addr string, count *counter) *redis.Client {
	b.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		DialerRetries:         1,
		PoolSize:              32,
	})
	if count != nil {
		c.AddHook(count)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// counter is a go-redis hook counting the commands a client sends and its
// round trips (a pipeline is one).
type counter struct {
	cmds, trips atomic.Int64
}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.cmds.Add(1)
		c.trips.Add(1)
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.cmds.Add(int64(len(cmds)))
		c.trips.Add(1)
		return next(ctx, cmds)
	}
}

// newShared returns a Shared limiter flushing every flushInterval to the
// Redis at addr, closed by b's cleanup.
func newShared(b *testing.B, addr string, count *counter) *shardsync.Shared {
	b.Helper()
	s, err := shardsync.NewShared(newClient(b, addr, count), shardsync.SharedConfig{
		Config:        shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: limit, Window: window},
		FlushInterval: flushInterval,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// newExact returns an Exact limiter of algorithm alg deciding in the
// Redis at addr, closed by b's cleanup, which fails b if a decision did
// not make its round trip (fell back to the policy, or was answered by
// the deny cache: nothing is ever denied).
func newExact(b *testing.B, addr string, count *counter, alg shardlimit.Algorithm) *shardsync.Exact {
	b.Helper()
	e, err := shardsync.NewExact(newClient(b, addr, count), shardsync.ExactConfig{
		Config:  shardlimit.Config{Algorithm: alg, Limit: limit, Window: window},
		Timeout: time.Second,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if st := e.ExactStats(); st.Errors != 0 || st.PolicyDecisions != 0 || st.DenyCacheHits != 0 {
			b.Errorf("not every decision made a round trip: %+v", st)
		}
		_ = e.Close()
	})
	return e
}

// redisRate returns the decision of a go-redis/redis_rate limiter (GCRA,
// keys under its own prefix "rate:") deciding in the Redis at addr.
func redisRate(b *testing.B, addr string, count *counter) func(key string) bool {
	rl := redis_rate.NewLimiter(newClient(b, addr, count))
	lim := redis_rate.Limit{Rate: limit, Burst: limit, Period: window}
	return func(k string) bool {
		res, err := rl.Allow(context.Background(), k, lim)
		return err == nil && res.Allowed > 0
	}
}

// keys returns n distinct keys.
func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "user:" + strconv.Itoa(i)
	}
	return out
}

// BenchmarkSyncAllow times AllowN on 1,000 existing keys, serial and with
// GOMAXPROCS goroutines, for the plain local limiter (impl=local) and for a
// Shared limiter whose reconciler flushes the decided keys to a private
// Redis every 50 ms meanwhile (impl=shared). benchstat -col /impl shows the
// cost of sharing as the ratio of the two.
func BenchmarkSyncAllow(b *testing.B) {
	srv := redistest.StartServer(b)
	ks := keys(1000)
	impls := []struct {
		name string
		new  func(b *testing.B) shardlimit.Limiter
	}{
		{"local", func(b *testing.B) shardlimit.Limiter {
			l, err := shardlimit.New(shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: limit, Window: window})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = l.Close() })
			return l
		}},
		{"shared", func(b *testing.B) shardlimit.Limiter { return newShared(b, srv.Addr, nil) }},
	}
	for _, mode := range []string{"serial", "parallel"} {
		for _, impl := range impls {
			b.Run(fmt.Sprintf("mode=%s/impl=%s", mode, impl.name), func(b *testing.B) {
				l := impl.new(b)
				now := time.Now()
				for _, k := range ks {
					l.AllowN(k, now, 1)
				}
				var denied atomic.Int64
				b.ReportAllocs()
				b.ResetTimer()
				if mode == "serial" {
					for i := range b.N {
						if !l.AllowN(ks[i%len(ks)], now, 1).Allowed {
							denied.Add(1)
						}
					}
				} else {
					var next atomic.Int64
					b.RunParallel(func(pb *testing.PB) {
						i := int(next.Add(1)) * 7919
						for pb.Next() {
							if !l.AllowN(ks[i%len(ks)], now, 1).Allowed {
								denied.Add(1)
							}
							i++
						}
					})
				}
				b.StopTimer()
				if n := denied.Load(); n > 0 {
					b.Fatalf("%d of %d decisions denied", n, b.N)
				}
				if s, ok := l.(*shardsync.Shared); ok {
					if st := s.SharedStats(); st.ItemErrors != 0 || st.State != shardsync.Healthy {
						b.Fatalf("reconciler failed during the benchmark: %+v", st)
					}
				}
			})
		}
	}
}

// BenchmarkSyncRoundTrip times one decision that makes a round trip to a
// private Redis, serial, over 1,000 keys (round robin): sync.Exact with
// GCRA (impl=exact; its deny cache never answers, nothing is denied) and
// github.com/go-redis/redis_rate/v10 (impl=redis_rate, GCRA too), on
// clients with the same options. allocs/op is what each decision
// allocates, the go-redis client's share included; benchstat -col /impl
// compares the two.
func BenchmarkSyncRoundTrip(b *testing.B) {
	srv := redistest.StartServer(b)
	ks := keys(1000)
	for _, impl := range []string{"exact", "redis_rate"} {
		b.Run("impl="+impl, func(b *testing.B) {
			var allow func(string) bool
			switch impl {
			case "exact":
				e := newExact(b, srv.Addr, nil, shardlimit.GCRA)
				allow = func(k string) bool { return e.AllowN(k, time.Now(), 1).Allowed }
			case "redis_rate":
				allow = redisRate(b, srv.Addr, nil)
			}
			for _, k := range ks { // scripts loaded, connections open
				allow(k)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if !allow(ks[i%len(ks)]) {
					b.Fatal("denied")
				}
			}
		})
	}
}

// serverOps returns the calls of every command the Redis at c has run,
// from INFO commandstats, commands run by scripts included, minus the
// commands of the measurement itself (INFO) and of connection setup
// (HELLO, CLIENT, PING, SELECT).
func serverOps(b *testing.B, c *redis.Client) int64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		base, _, _ := strings.Cut(strings.TrimPrefix(name, "cmdstat_"), "|")
		switch base {
		case "info", "hello", "client", "ping", "select":
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		v, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			b.Fatalf("INFO commandstats line %q: %v", line, err)
		}
		n += v
	}
	return n
}

// drive makes n requests over ks at rate per second, open loop: 8 workers,
// request i at start + i/rate whatever the answers. It returns the time
// taken and the number of denials.
func drive(ks []string, n int, rate float64, allow func(key string) bool) (time.Duration, int64) {
	const workers = 8
	gap := time.Duration(float64(time.Second) / rate)
	var denied atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				if d := time.Until(start.Add(time.Duration(i) * gap)); d > 0 {
					time.Sleep(d)
				}
				if !allow(ks[i%len(ks)]) {
					denied.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), denied.Load()
}

// BenchmarkSyncRedisCommands drives 2,000 requests per op at 5,000
// requests/s over 10 or 1,000 keys (round robin) and counts what they cost
// in Redis:
//
//   - impl=shared: sync.Shared, one script call per key decided in each
//     50 ms flush, all of a flush in one pipeline (counted up to a last
//     flush of what is pending after the requests);
//   - impl=exact: sync.Exact, one script call and one round trip per
//     decision;
//   - impl=redis_rate: github.com/go-redis/redis_rate/v10, likewise.
//
// Metrics: cmds/req, the commands this node sent per request (a go-redis
// hook counts them); rtt/req, its round trips per request (a pipeline is
// one); cmds/s, commands per second from this node; server-ops/req, every
// command Redis ran per request, those its scripts call included (INFO
// commandstats of a private server, before and after); req/s, the rate
// achieved. ns/op is the time of 2,000 paced requests and means nothing.
func BenchmarkSyncRedisCommands(b *testing.B) {
	const (
		requests = 2000
		rate     = 5000.0
	)
	srv := redistest.StartServer(b)
	admin := newClient(b, srv.Addr, nil)
	for _, nkeys := range []int{10, 1000} {
		ks := keys(nkeys)
		for _, impl := range []string{"shared", "exact", "redis_rate"} {
			b.Run(fmt.Sprintf("keys=%d/impl=%s", nkeys, impl), func(b *testing.B) {
				count := new(counter)
				var allow func(string) bool
				settle := func() {} // after a run: what is pending reaches Redis
				switch impl {
				case "shared":
					s := newShared(b, srv.Addr, count)
					allow = func(k string) bool { return s.AllowN(k, time.Now(), 1).Allowed }
					settle = func() {
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						defer cancel()
						if err := s.Flush(ctx); err != nil {
							b.Fatal(err)
						}
					}
				case "exact":
					e := newExact(b, srv.Addr, count, shardlimit.FixedWindow)
					allow = func(k string) bool { return e.AllowN(k, time.Now(), 1).Allowed }
				case "redis_rate":
					allow = redisRate(b, srv.Addr, count)
				}
				for _, k := range ks { // scripts loaded, connections open
					allow(k)
				}
				settle()
				var cmds, trips, ops, denied int64
				var took time.Duration
				b.ResetTimer()
				for range b.N {
					ops0, cmds0, trips0 := serverOps(b, admin), count.cmds.Load(), count.trips.Load()
					d, n := drive(ks, requests, rate, allow)
					settle()
					ops += serverOps(b, admin) - ops0
					cmds += count.cmds.Load() - cmds0
					trips += count.trips.Load() - trips0
					took += d
					denied += n
				}
				b.StopTimer()
				if denied > 0 {
					b.Fatalf("%d requests denied", denied)
				}
				total := float64(b.N * requests)
				b.ReportMetric(float64(cmds)/total, "cmds/req")
				b.ReportMetric(float64(trips)/total, "rtt/req")
				b.ReportMetric(float64(cmds)/took.Seconds(), "cmds/s")
				b.ReportMetric(float64(ops)/total, "server-ops/req")
				b.ReportMetric(total/took.Seconds(), "req/s")
			})
		}
	}
}

// serverCPU returns the CPU time the Redis at c has used, user and system
// (INFO cpu: used_cpu_user + used_cpu_sys), in seconds.
func serverCPU(b *testing.B, c *redis.Client) float64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "used_cpu_user" && name != "used_cpu_sys") {
			continue
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			b.Fatalf("INFO cpu line %q: %v", line, err)
		}
		sum += x
	}
	return sum
}

// BenchmarkSyncRedisCPU drives 10,000 requests per op at 5,000 requests/s
// over 1,000 or 100,000 keys (round robin) through sync.Shared (flushing
// every 50 ms) and through go-redis/redis_rate, each against a private
// redis-server, and reports the Redis CPU time per request: the server's
// used_cpu_user + used_cpu_sys (INFO cpu) over the op, a last flush of
// what Shared has pending included, divided by the requests. Each key is
// decided once before the timed ops (its counters exist, scripts loaded).
// The server's own background work (serverCron, about 10 times a second)
// is in both impls' figures alike. Run it with -benchtime 1x (each op
// takes 2 s) and -count 8: the impls interleave across counts. Metrics:
// redis-cpu-us/req; server-ops/req (INFO commandstats, as in
// SyncRedisCommands); req/s, the rate achieved. ns/op means nothing.
func BenchmarkSyncRedisCPU(b *testing.B) {
	const (
		requests = 10000
		rate     = 5000.0
	)
	for _, nkeys := range []int{1000, 100000} {
		ks := keys(nkeys)
		for _, impl := range []string{"shared", "redis_rate"} {
			b.Run(fmt.Sprintf("keys=%d/impl=%s", nkeys, impl), func(b *testing.B) {
				srv := redistest.StartServer(b)
				admin := newClient(b, srv.Addr, nil)
				var allow func(string) bool
				settle := func() {}
				switch impl {
				case "shared":
					s := newShared(b, srv.Addr, nil)
					allow = func(k string) bool { return s.AllowN(k, time.Now(), 1).Allowed }
					settle = func() {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer cancel()
						if err := s.Flush(ctx); err != nil {
							b.Fatal(err)
						}
					}
				case "redis_rate":
					allow = redisRate(b, srv.Addr, nil)
				}
				if _, n := drive(ks, len(ks), 1e9, allow); n > 0 { // every key once, unpaced
					b.Fatalf("%d warm-up requests denied", n)
				}
				settle()
				var cpu float64
				var ops, denied int64
				var took time.Duration
				b.ResetTimer()
				for range b.N {
					cpu0, ops0 := serverCPU(b, admin), serverOps(b, admin)
					d, n := drive(ks, requests, rate, allow)
					settle()
					cpu += serverCPU(b, admin) - cpu0
					ops += serverOps(b, admin) - ops0
					took += d
					denied += n
				}
				b.StopTimer()
				if denied > 0 {
					b.Fatalf("%d requests denied", denied)
				}
				total := float64(b.N * requests)
				b.ReportMetric(cpu*1e6/total, "redis-cpu-us/req")
				b.ReportMetric(float64(ops)/total, "server-ops/req")
				b.ReportMetric(total/took.Seconds(), "req/s")
			})
		}
	}
}
