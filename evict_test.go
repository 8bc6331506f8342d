package shardlimit

import (
	"errors"
	"strconv"
	"testing"
	"time"
)

// fullKeys is the MaxKeys of the full-table benchmarks: the middleware's
// default cap (httplimit.DefaultMaxKeys).
const fullKeys = 1 << 20

// numKey writes key i, "n" and i in decimal, into buf and returns it.
func numKey(buf *[24]byte, i int) []byte {
	return strconv.AppendUint(append(buf[:0], 'n'), uint64(i), 10)
}

// BenchmarkInsert times one call per op with the table around a million
// keys, for each algorithm:
//
//   - uncapped: a new key in a table without MaxKeys (it keeps growing);
//   - stored: a stored key of the million;
//   - EvictLeastRecent/busy: a new key in a full table (MaxKeys 2^20) in
//     which no key is idle (one fixed instant), so every insert evicts the
//     least recently used of a sample, the policy's worst case;
//   - RejectNewKeys/halfidle: a new key in a full table in which half the
//     keys are idle (instants advance by W per 2^19 calls: the keys of the
//     last 2^19 calls are busy), so every insert evicts an idle key;
//   - RejectNewKeys/busy: a new key in a full table with no idle key,
//     denied with ErrTooManyKeys: the cost of a flood of new keys that a
//     full table turns away.
//
// Tables are filled before the timer with 1.25 times MaxKeys keys, so
// that every shard is full.
func BenchmarkInsert(b *testing.B) {
	const window = time.Minute
	step := int64(window) / (fullKeys / 2)
	type scenario struct {
		name    string
		cap     bool
		policy  FullPolicy
		advance bool // instants advance by step per call
		stored  bool // time stored keys, not new ones
		denied  bool // every timed call is denied with ErrTooManyKeys
	}
	for _, alg := range allAlgorithms {
		for _, sc := range []scenario{
			{name: "uncapped"},
			{name: "stored", stored: true},
			{name: "EvictLeastRecent/busy", cap: true, policy: EvictLeastRecent},
			{name: "RejectNewKeys/halfidle", cap: true, policy: RejectNewKeys, advance: true},
			{name: "RejectNewKeys/busy", cap: true, policy: RejectNewKeys, denied: true},
		} {
			b.Run(alg.String()+"/"+sc.name, func(b *testing.B) {
				cfg := Config{Algorithm: alg, Limit: 1000, Window: window, JanitorInterval: -1}
				if sc.cap {
					cfg.MaxKeys, cfg.WhenFull = fullKeys, sc.policy
				}
				l := mustNew(b, cfg)
				base := int64(t0Unix) * 1e9
				instant := func(i int) time.Time {
					if sc.advance {
						return time.Unix(0, base+int64(i)*step)
					}
					return time.Unix(0, base)
				}
				var buf [24]byte
				fill := fullKeys + fullKeys/4
				if sc.stored {
					fill = fullKeys
				}
				for i := range fill {
					l.AllowBytesN(numKey(&buf, i), instant(i), 1)
				}
				if sc.cap && l.Len() != fullKeys {
					b.Fatalf("%d keys stored after filling, want %d", l.Len(), fullKeys)
				}
				i, bad := fill, 0
				b.ReportAllocs()
				for b.Loop() {
					if sc.stored {
						if !l.AllowBytesN(numKey(&buf, i%fullKeys), instant(i), 1).Allowed {
							bad++
						}
					} else {
						r := l.AllowBytesN(numKey(&buf, i), instant(i), 1)
						if sc.denied != errors.Is(r.Err, ErrTooManyKeys) || !sc.denied && !r.Allowed {
							bad++
						}
					}
					i++
				}
				b.StopTimer()
				if bad > 0 {
					b.Fatalf("%d of %d calls went the unexpected way", bad, b.N)
				}
			})
		}
	}
}
