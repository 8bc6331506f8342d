package sync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	stdsync "sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// TestRedisClusterShared runs Shared on a local 6-node
// Redis Cluster (3 masters, 3 replicas; fixed window, limit 100, W = 60 s),
// beside a limiter of two rates (sliding counter of 6 buckets, 100 per
// minute and 1000 per hour), whose every item reads 7 counters of
// one rate:
//
//  1. one Allow for each of user:0 .. user:999 and 8 more keys, each in
//     the slot of one of them, then flushes until every
//     unit is applied: no error reply but refusals of a cluster still
//     settling (CLUSTERDOWN, TRYAGAIN: never applied, so sent again; no
//     CROSSSLOT), the script calls reached every master, every call's
//     Redis keys are in one hash slot, some calls carry several limiter
//     keys (of one slot), and every key's counter (of each rate) is 1;
//  2. a master is killed, then every key takes a second unit while the
//     reconciler keeps flushing: the flushes for the dead master's slots
//     fail until a replica has taken over, then recover on their own, and
//     every counter becomes exactly 2 (items never sent are retried;
//     items whose reply was lost are healed by the floor, never counted
//     twice).
func TestRedisClusterShared(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 cl.Addrs,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
		DialerRetries:         1,
		// Bounded by each flush's context as well; not 2 s, which a
		// loaded machine can take for one reply.
		ReadTimeout:  10 * time.Second,
		WriteTimeout: 10 * time.Second,
	})
	t.Cleanup(func() { _ = client.Close() })
	replies := &errorReplies{}
	client.AddHook(replies)
	clock := shardlimit.NewManualClock(at(time.Second))
	now := clock.Now()
	const flushTimeout = time.Minute
	s := newShared(t, client, SharedConfig{
		Config:        shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 100, Window: time.Minute, Clock: clock},
		FlushInterval: 50 * time.Millisecond,
		// A flush cut short leaves its units unknown (healed only by the
		// key's next unit), and the test wants exact counts: at 5 s,
		// flushes of 2,000 script calls to the cluster under MONITOR on a
		// loaded machine were cut short. A dead master refuses at once.
		FlushTimeout: flushTimeout,
	})
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
	}
	// Each partner decided right after its key: a background flush falls
	// between the two only by a rare chance, never for all 8 pairs.
	for i := range 8 {
		keys = slices.Insert(keys, 2*i+1, slotPartners(keys[2*i:2*i+1])...)
	}
	id := now.UnixNano() / int64(time.Minute)
	masters := cl.Masters()
	if len(masters) != 3 {
		t.Fatalf("masters %v", masters)
	}
	var mons []*redistest.Monitor
	for _, m := range masters {
		mons = append(mons, redistest.StartMonitor(t, m))
	}

	two := newShared(t, client, SharedConfig{
		Config: shardlimit.Config{Algorithm: shardlimit.SlidingCounter, Buckets: 6, Clock: clock,
			Rates: []shardlimit.Rate{{Limit: 100, Window: time.Minute}, {Limit: 1000, Window: time.Hour}}},
		FlushInterval: 50 * time.Millisecond,
		FlushTimeout:  flushTimeout,
	})
	// twoCounters reads the counters of every rate of two in the bucket of
	// now, or returns what is wrong.
	twoCounters := func(want int64) string {
		for _, r := range two.tab.SyncRates() {
			got, err := readRateCounters(t, client, two, keys, time.Duration(r.Window), now.UnixNano()/r.Size)
			if err != nil {
				return err.Error()
			}
			for i, v := range got {
				if v != want {
					return fmt.Sprintf("counter of %s, rate %v = %d, want %d; stats %+v", keys[i], time.Duration(r.Window), v, want, two.SharedStats())
				}
			}
		}
		return ""
	}
	for _, k := range keys {
		if r := s.AllowN(k, now, 1); !r.Allowed || r.Remaining != 99 {
			t.Fatalf("%s: %+v", k, r)
		}
		if r := two.AllowN(k, now, 1); !r.Allowed || r.Remaining != 99 {
			t.Fatalf("%s of two rates: %+v", k, r)
		}
	}
	// Flushes until every unit sent is applied: a unit refused by a
	// cluster still settling is sent again by the next flush.
	for _, l := range []struct {
		s    *Shared
		want uint64
	}{{s, uint64(len(keys))}, {two, 2 * uint64(len(keys))}} {
		eventually(t, 2*flushTimeout, func() string {
			_ = l.s.Flush(ctxT(t, flushTimeout)) // its errors are in the stats and the replies
			if msg := replies.unexpected(); msg != "" {
				t.Fatal(msg)
			}
			if st := l.s.SharedStats(); st.SentUnits != l.want || st.Pending != 0 {
				return fmt.Sprintf("stats after a flush %+v", st)
			}
			return ""
		})
		if st := l.s.SharedStats(); st.ItemErrors != 0 {
			t.Logf("%d items refused by a cluster still settling, sent again: %v", st.ItemErrors, st.LastError)
		}
	}
	if msg := twoCounters(1); msg != "" {
		t.Fatal(msg)
	}
	for i, v := range counters(t, client, s, keys, id) {
		if v != 1 {
			t.Fatalf("counter of %s = %d, want 1", keys[i], v)
		}
	}
	// The eviction watch reads INFO of every master (two's first check
	// comes after the monitors started).
	eventually(t, 10*time.Second, func() string {
		for _, l := range []*Shared{s, two} {
			if ev := l.SharedStats().Eviction; ev.Policy != "noeviction" || !ev.Safe() || ev.Err != nil {
				return fmt.Sprintf("eviction %+v", ev)
			}
		}
		return ""
	})
	// One INFO per check for all the client's limiters, from every
	// master: the check the monitors see comes at most EvictionCheck (2 s)
	// after they started.
	eventually(t, 10*time.Second, func() string {
		for i, m := range mons {
			if !slices.ContainsFunc(m.Sync(t), func(cmd []string) bool { return strings.EqualFold(cmd[0], "INFO") }) {
				return fmt.Sprintf("master %s got no INFO", masters[i])
			}
		}
		return ""
	})
	multi := 0 // script calls of several limiter keys (of one slot)
	for i, m := range mons {
		calls, infos := 0, 0
		for _, cmd := range m.Sync(t) {
			switch name := strings.ToUpper(cmd[0]); name {
			case "EVALSHA", "EVAL":
				calls++
				msg, tags := oneSlot(cmd)
				if msg != "" {
					t.Errorf("master %s: %s", masters[i], msg)
				}
				if tags > 1 {
					multi++
				}
			case "INFO":
				infos++
			}
		}
		if calls == 0 || infos == 0 {
			t.Errorf("master %s got %d script calls and %d INFO", masters[i], calls, infos)
		}
	}
	// user:0 .. user:999 are in 1000 slots; each of the first 8 shares its
	// slot with a partner, and a flush carries the keys of one slot in one
	// call.
	if multi == 0 {
		t.Error("no script call carried several limiter keys of one slot")
	}

	// Step 2: failover under load.
	for _, m := range masters {
		waitReplicated(t, m)
	}
	// The master is dead before the second units are taken, and no replica
	// can take over for ClusterNodeTimeout (1 s), twenty flush intervals:
	// the flushes of the dead master's keys must fail first. (Killing it
	// concurrently let the units reach Redis before the kill, and the test
	// then did not test the failover.)
	awaitTakeover := cl.StopMaster(masters[0])
	for _, k := range keys {
		if r := s.AllowN(k, now, 1); !r.Allowed {
			t.Fatalf("%s during the failover: %+v", k, r)
		}
		if r := two.AllowN(k, now, 1); !r.Allowed {
			t.Fatalf("%s of two rates during the failover: %+v", k, r)
		}
	}
	t.Logf("killed master %s; %s took over", masters[0], awaitTakeover())
	eventually(t, 2*flushTimeout, func() string {
		got, err := readCounters(t, client, s, keys, id)
		if err != nil {
			return err.Error()
		}
		for i, v := range got {
			if v != 2 {
				return fmt.Sprintf("counter of %s = %d, want 2; stats %+v", keys[i], v, s.SharedStats())
			}
		}
		return ""
	})
	eventually(t, 2*flushTimeout, func() string { return twoCounters(2) })
	st := s.SharedStats()
	t.Logf("stats after the failover %+v", st)
	t.Logf("stats of two rates after the failover %+v", two.SharedStats())
	if st.ItemErrors == 0 {
		t.Error("no item failed while a master was dead: the test did not test the failover")
	}
}

// errorReplies is a go-redis hook that records the error replies a client
// got other than NOSCRIPT (answered by EVAL) and the refusals of a cluster
// still settling (CLUSTERDOWN, TRYAGAIN), whose commands Redis did not
// execute.
type errorReplies struct {
	mu   stdsync.Mutex
	errs []string
}

func (h *errorReplies) record(cmds ...redis.Cmder) {
	for _, c := range cmds {
		err := c.Err()
		var rerr redis.Error
		if errors.Is(err, redis.Nil) || !errors.As(err, &rerr) || notSettled(err) || redis.HasErrorPrefix(err, "NOSCRIPT") {
			continue
		}
		h.mu.Lock()
		h.errs = append(h.errs, fmt.Sprintf("%v: %v", c.Args()[:min(3, len(c.Args()))], err))
		h.mu.Unlock()
	}
}

// unexpected returns the error replies recorded, "" if none.
func (h *errorReplies) unexpected() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.errs) == 0 {
		return ""
	}
	return fmt.Sprintf("%d error replies, such as %s", len(h.errs), h.errs[0])
}

func (h *errorReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *errorReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.record(cmd)
		return err
	}
}

func (h *errorReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.record(cmds...)
		return err
	}
}

// oneSlot returns what is wrong with the Redis keys of a script call
// (EVAL or EVALSHA, its numkeys, its keys), "" if every key is in the hash
// slot of the first (a call never spans two slots), and how many hash
// tags (limiter keys) the call names.
func oneSlot(cmd []string) (string, int) {
	if len(cmd) < 3 {
		return fmt.Sprintf("short script call %q", cmd), 0
	}
	n, err := strconv.Atoi(cmd[2])
	if err != nil || n < 1 || len(cmd) < 3+n {
		return fmt.Sprintf("script call %q: bad numkeys", cmd), 0
	}
	keys := cmd[3 : 3+n]
	tags := map[string]bool{}
	for _, k := range keys {
		i := strings.IndexByte(k, '{')
		j := strings.IndexByte(k[i+1:], '}')
		if i < 0 || j <= 0 {
			return fmt.Sprintf("script call with key %q: no hash tag", k), 0
		}
		tags[k[i:i+j+2]] = true
		if keySlot(k) != keySlot(keys[0]) {
			return fmt.Sprintf("script call with keys %q: not one hash slot", keys), 0
		}
	}
	return "", len(tags)
}

// slotPartners returns, for each key of keys, another key user:<n> (n >=
// 1000) in the same Redis Cluster hash slot.
func slotPartners(keys []string) []string {
	want := map[int]bool{}
	for _, k := range keys {
		want[keySlot(k)] = true
	}
	var out []string
	for n := 1000; len(want) > 0; n++ {
		k := fmt.Sprintf("user:%d", n)
		if s := keySlot(k); want[s] {
			delete(want, s)
			out = append(out, k)
		}
	}
	return out
}
