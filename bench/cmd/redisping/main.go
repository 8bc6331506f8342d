// Command redisping exits 0 if the Redis server the benchmarks use
// ($BENCH_REDIS_ADDR, default 127.0.0.1:6379) answers PING within a second,
// and 1 otherwise. run.sh uses it to say whether redis_rate was measured.
package main

import (
	"fmt"
	"os"

	"github.com/shardlimit/shardlimit/bench"
)

func main() {
	c, err := bench.RedisClient()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_ = c.Close()
	fmt.Println("redis answering at", bench.RedisAddr)
}
