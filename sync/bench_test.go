package sync

import (
	"fmt"
	"strconv"
	"strings"
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

// BenchmarkBirthsCheck measures the check of a decision's reply against
// the birth of a key's state seen before (see births), the work the birth
// proof adds to every decision besides the reply's one more integer per
// rate.
func BenchmarkBirthsCheck(b *testing.B) {
	bs := newBirths(1, DefaultJournalKeys)
	lims := limitSet{10}
	d := birthReply(100, 5, 0, 1, 1, 1_000_000)
	b.ReportAllocs()
	for b.Loop() {
		d.at++
		if bs.check("user:42", 0, &d, &lims, 1, true) {
			b.Fatal("a loss")
		}
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

// BenchmarkExactRates measures one Exact decision (a script call to a
// private Redis, a key admitted every time) with one rate and with two
// (one call either way, deciding both), and reports the script's time in
// Redis (redis-us/op, from INFO commandstats), which the round trip's
// scheduling noise does not blur. Compare with: benchstat -col /rates.
func BenchmarkExactRates(b *testing.B) {
	srv := redistest.StartServer(b)
	c := newClient(b, srv.Addr)
	for _, alg := range []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingCounter, shardlimit.GCRA} {
		for _, rates := range [][]shardlimit.Rate{
			{{Limit: shardlimit.MaxLimit, Window: time.Hour}},
			{{Limit: shardlimit.MaxLimit, Window: time.Hour}, {Limit: shardlimit.MaxLimit, Window: time.Minute}},
		} {
			b.Run(fmt.Sprintf("alg=%v/rates=%d", alg, len(rates)), func(b *testing.B) {
				e := newExact(b, c, ExactConfig{Config: shardlimit.Config{Algorithm: alg, Rates: rates}, EvictionCheck: -1})
				if !e.Allow("k") { // loads the script
					b.Fatal("denied")
				}
				calls, usec := evalshaStats(b, srv.Addr)
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if !e.Allow("k") {
						b.Fatal("denied")
					}
				}
				b.StopTimer()
				calls2, usec2 := evalshaStats(b, srv.Addr)
				if calls2-calls != int64(b.N) {
					b.Fatalf("%d EVALSHA for %d decisions", calls2-calls, b.N)
				}
				b.ReportMetric(float64(usec2-usec)/float64(b.N), "redis-us/op")
				if st := e.ExactStats(); st.Errors != 0 {
					b.Fatalf("stats %+v", st)
				}
			})
		}
	}
}

// evalshaStats returns the count of EVALSHA calls the Redis at addr ran
// and their total time in microseconds (INFO commandstats).
func evalshaStats(b testing.TB, addr string) (calls, usec int64) {
	return commandStats(b, addr, "evalsha")
}

// commandStats returns the count of calls of the command name (lower
// case) the Redis at addr ran and their total time in microseconds (INFO
// commandstats).
func commandStats(b testing.TB, addr, name string) (calls, usec int64) {
	b.Helper()
	info, err := redistest.DoString(addr, "INFO", "commandstats")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return calls, usec
}

// BenchmarkRedisBackendAdd measures one pipeline of 100 items, each adding
// a unit to a counter of its own with a floor, as a Shared flush sends
// them, to the shared test Redis: with Item.Seq (seq=on, what Shared sends:
// the script also keeps the node's last flush number, q:<node>) and
// without (seq=off). Per item: ns/op / 100. Compare with: benchstat -col
// /seq.
func BenchmarkRedisBackendAdd(b *testing.B) {
	addr := redistest.RequireRedis(b)
	for _, seq := range []bool{false, true} {
		name := "seq=off"
		if seq {
			name = "seq=on"
		}
		b.Run(name, func(b *testing.B) {
			c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1})
			defer c.Close()
			be, err := NewRedisBackend(c, redistest.Prefix(b))
			if err != nil {
				b.Fatal(err)
			}
			items := make([]Item, 100)
			for i := range items {
				items[i] = Item{Key: "k" + strconv.Itoa(i), ID: 1, Delta: 1, Node: "0123456789abcdef", TTL: time.Minute}
			}
			out := make([]ItemResult, len(items))
			n := int64(0)
			ctx := ctxT(b, time.Hour)
			b.ReportAllocs()
			for b.Loop() {
				n++
				for i := range items {
					items[i].Floor = n
					if seq {
						items[i].Seq = n
					}
				}
				out = be.Add(ctx, items, out)
				if out[0].Outcome != Applied || out[99].Total != n {
					b.Fatalf("result %+v", out[0])
				}
			}
		})
	}
}

// BenchmarkJournalRecord measures the journal's cost per decision of a
// known key (beside BenchmarkExactRoundTrip: a round trip is tens of
// microseconds), over 1,000 keys from all goroutines.
func BenchmarkJournalRecord(b *testing.B) {
	for _, alg := range []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingCounter, shardlimit.GCRA} {
		b.Run(alg.String(), func(b *testing.B) {
			j := testJournal(b, ratesCfg(alg, 6, rate(shardlimit.MaxLimit, time.Hour)), DefaultJournalKeys)
			keys := make([]string, 1000)
			now := us(0)
			for i := range keys {
				keys[i] = fmt.Sprint("user:", i)
				j.record(keys[i], now, 1, false)
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					j.record(keys[i%len(keys)], now, 1, false)
					i++
				}
			})
		})
	}
}

// BenchmarkExactDenied measures a decision on a key the store denied for
// the next hour, from one goroutine, on a Redis of its own: answered by
// the deny cache (cache=on) or by a round trip (cache=off), with the
// script calls the store ran per decision (INFO commandstats).
func BenchmarkExactDenied(b *testing.B) {
	srv := redistest.StartServer(b)
	addr := srv.Addr
	c := newClient(b, addr)
	for _, keys := range []int{0, -1} {
		name := "cache=on"
		if keys < 0 {
			name = "cache=off"
		}
		b.Run(name, func(b *testing.B) {
			e := newExact(b, c, ExactConfig{Config: fixedCfg(1, time.Hour), DenyCacheKeys: keys, EvictionCheck: -1})
			e.Allow("k")
			if e.Allow("k") {
				b.Fatal("admitted over the limit")
			}
			calls, _ := evalshaStats(b, addr)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if e.Allow("k") {
					b.Fatal("admitted over the limit")
				}
			}
			b.StopTimer()
			calls2, _ := evalshaStats(b, addr)
			b.ReportMetric(float64(calls2-calls)/float64(b.N), "scripts/op")
		})
	}
}
