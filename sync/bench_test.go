package sync

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// BenchmarkExactRoundTrip measures one Exact decision (a script call to the
// shared test Redis, a key admitted every time) with a client whose replies
// are scanned by LimitReplies (reply=limited) and one without
// (reply=plain). Compare with: benchstat -col /reply.
func BenchmarkExactRoundTrip(b *testing.B) {
	addr := redistest.RequireRedis(b)
	for _, limited := range []bool{false, true} {
		name := "reply=plain"
		if limited {
			name = "reply=limited"
		}
		b.Run(name, func(b *testing.B) {
			opt := &redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1}
			if limited {
				opt.Dialer = LimitReplies(redis.NewDialer(opt), 0)
			}
			c := redis.NewClient(opt)
			defer c.Close()
			e := newExact(b, c, ExactConfig{Config: shardlimit.Config{Algorithm: shardlimit.GCRA, Limit: shardlimit.MaxLimit, Window: time.Hour}})
			if !e.Allow("k") { // loads the script
				b.Fatal("denied")
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if !e.Allow("k") {
					b.Fatal("denied")
				}
			}
			b.StopTimer()
			if st := e.ExactStats(); st.Errors != 0 {
				b.Fatalf("stats %+v", st)
			}
		})
	}
}

// BenchmarkRespScan measures LimitReplies' scan of one decision reply.
func BenchmarkRespScan(b *testing.B) {
	reply := []byte("*4\r\n:1\r\n:1073741822\r\n:3599999\r\n:0\r\n")
	s := respScanner{max: DefaultMaxReplyBytes}
	b.SetBytes(int64(len(reply)))
	b.ReportAllocs()
	for b.Loop() {
		if err := s.scan(reply); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExactRates measures one Exact decision (a script call to the
// shared test Redis, a key admitted every time) with one rate and with two
// (one call either way, deciding both). Compare with:
// benchstat -col /rates.
func BenchmarkExactRates(b *testing.B) {
	c := newClient(b, redistest.RequireRedis(b))
	for _, alg := range []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingCounter, shardlimit.GCRA} {
		for _, rates := range [][]shardlimit.Rate{
			{{Limit: shardlimit.MaxLimit, Window: time.Hour}},
			{{Limit: shardlimit.MaxLimit, Window: time.Hour}, {Limit: shardlimit.MaxLimit, Window: time.Minute}},
		} {
			b.Run(fmt.Sprintf("alg=%v/rates=%d", alg, len(rates)), func(b *testing.B) {
				e := newExact(b, c, ExactConfig{Config: shardlimit.Config{Algorithm: alg, Rates: rates}})
				if !e.Allow("k") { // loads the script
					b.Fatal("denied")
				}
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if !e.Allow("k") {
						b.Fatal("denied")
					}
				}
				b.StopTimer()
				if st := e.ExactStats(); st.Errors != 0 {
					b.Fatalf("stats %+v", st)
				}
			})
		}
	}
}
