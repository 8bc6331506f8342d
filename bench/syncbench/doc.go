// Package syncbench measures what sharing limits through Redis costs: the
// decision time of a sync.Shared limiter whose reconciler flushes to Redis
// every 50 ms against the plain in-process limiter, and the Redis commands
// per request of Shared, of sync.Exact (one script per decision) and of
// go-redis/redis_rate (likewise) at a given request rate, and the Redis
// CPU time per request of Shared and redis_rate (BenchmarkSyncRedisCPU,
// at 1,000 and 100,000 keys), and the time and allocations of one
// decision by a round trip of sync.Exact and of redis_rate
// (BenchmarkSyncRoundTrip). The benchmarks
// are in syncbench_test.go; run.sh runs them and compares the
// implementations with benchstat -col /impl. Each benchmark starts a
// private redis-server on a loopback port (skipped if redis-server is not
// on PATH), so INFO commandstats counts this benchmark's commands only.
package syncbench
