package sync

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// TestRedisClusterExact runs against a local 6-node Redis Cluster (3 masters,
// 3 replicas):
//
//  1. one batch of 1,000 keys user:0..user:999 (plus 100 sliding-counter
//     items that each read 6 buckets) spread over all masters: zero errors
//     but refusals of a cluster still settling (CLUSTERDOWN, TRYAGAIN:
//     never applied, so sent again), every counter 1;
//  2. MONITOR on every master: each EVALSHA/EVAL touches keys of one slot
//     only (no CROSSSLOT is possible), and every master got some;
//  3. Exact decides keys on every master without error, with one rate
//     and with two (one script call, two keys of one slot);
//  4. a master is killed and failed over: after retrying the items that
//     failed (none can have been applied by a dead master), every counter
//     is exactly 2 (nothing lost, nothing counted twice), and Exact works
//     again with the state step 3 left (GCRA, 5 per hour: one unit back
//     every 12 minutes, so however long the failover took, 3 remain).
func TestRedisClusterExact(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 cl.Addrs,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
		// Bounded by each call's context as well. At 2 s, reading the
		// replies of one master's pipeline of ~370 script calls timed out
		// on a loaded machine, and go-redis's ClusterClient then sends the
		// whole pipeline again (whatever MaxRetries says), so items it had
		// applied were counted twice (Total 2 in step 1).
		ReadTimeout:  10 * time.Second,
		WriteTimeout: 10 * time.Second,
	})
	t.Cleanup(func() { _ = client.Close() })
	b := newBackend(t, client)

	const window = int64(1_000)
	var items []Item
	for i := range 1000 {
		items = append(items, Item{Key: fmt.Sprintf("user:%d", i), ID: window, Delta: 1, TTL: 5 * time.Minute})
	}
	for i := range 100 {
		items = append(items, Item{Key: fmt.Sprintf("s:%d", i), ID: 50, Delta: 1, TTL: 5 * time.Minute, Span: 5})
	}
	masters := cl.Masters()
	if len(masters) != 3 {
		t.Fatalf("masters %v", masters)
	}
	var mons []*redistest.Monitor
	for _, m := range masters {
		mons = append(mons, redistest.StartMonitor(t, m))
	}

	var out []ItemResult
	pending := items
	deadline := time.Now().Add(60 * time.Second)
	for len(pending) > 0 {
		out = b.Add(ctxT(t, 10*time.Second), pending, out)
		var again []Item
		for i, r := range out {
			want := []int64{1}
			if pending[i].Span > 0 {
				want = []int64{0, 0, 0, 0, 0, 1}
			}
			switch {
			case r.Outcome == NotApplied && notSettled(r.Err) && time.Now().Before(deadline):
				again = append(again, pending[i]) // refused: never applied
			case r.Outcome != Applied || r.Total != 1 || !slicesEqual(r.Totals, want):
				t.Fatalf("item %s: %+v (%v)", pending[i].Key, r, r.Err)
			}
		}
		if len(again) > 0 {
			t.Logf("%d items refused by a cluster still settling, sent again", len(again))
		}
		pending = again
	}
	checkCounters(t, client, b, items, 1)

	// Step 2: every script call's keys are in one slot, on every master.
	seen := 0
	for i, m := range mons {
		calls := 0
		for _, cmd := range m.Sync(t) {
			name := strings.ToUpper(cmd[0])
			if name != "EVALSHA" && name != "EVAL" {
				continue
			}
			calls++
			nk, err := strconv.Atoi(cmd[2])
			if err != nil || nk < 1 || 3+nk > len(cmd) {
				t.Fatalf("malformed script call %q", cmd)
			}
			keys := cmd[3 : 3+nk]
			for _, k := range keys[1:] {
				if keySlot(k) != keySlot(keys[0]) {
					t.Fatalf("one script call on %s touches slots %d and %d: %q", masters[i], keySlot(keys[0]), keySlot(k), cmd)
				}
			}
		}
		if calls == 0 {
			t.Errorf("master %s got no script call", masters[i])
		}
		seen += calls
	}
	if seen < len(items) {
		t.Errorf("MONITOR saw %d script calls for %d items", seen, len(items))
	}
	// The Go slot function agrees with the cluster's own.
	for _, key := range []string{"user:0", "user:517", "s:3", "}odd{"} {
		rk := b.CounterKey(key, window)
		v, err := redistest.Do(masters[0], "CLUSTER", "KEYSLOT", rk)
		if err != nil || v != int64(keySlot(rk)) {
			t.Fatalf("CLUSTER KEYSLOT %s = %v, %v; Go says %d", rk, v, err, keySlot(rk))
		}
	}

	// Step 3: exact mode on the cluster. GCRA gives a unit back every
	// W/5 of Redis time, and the state of a key expires when it has all
	// back: with W = 1 min, a failover on a loaded machine that took more
	// than 12 s reset the keys decided here to 4 remaining before step 4
	// could see 3. An hour gives 12 min, past the test's deadlines.
	e := newExact(t, client, ExactConfig{Config: gcraCfg(5, time.Hour)})
	for i := range 300 {
		if r := e.AllowN(fmt.Sprintf("user:%d", i), time.Now(), 1); !r.Allowed || r.Remaining != 4 {
			t.Fatalf("exact on cluster, user:%d: %+v", i, r)
		}
	}
	if st := e.ExactStats(); st.Errors != 0 {
		t.Fatalf("exact on cluster: %+v", st)
	}
	// Several rates per key: one script call reads and writes a state key
	// per rate, all under the key's hash tag, so never two slots
	// (CROSSSLOT would be an error in the stats).
	for _, cfg := range []shardlimit.Config{
		ratesCfg(shardlimit.FixedWindow, 0, rate(5, time.Minute), rate(50, time.Hour)),
		ratesCfg(shardlimit.SlidingCounter, 6, rate(5, time.Minute), rate(50, time.Hour)),
		ratesCfg(shardlimit.GCRA, 0, rate(5, time.Minute), rate(50, time.Hour)),
	} {
		em := newExact(t, client, ExactConfig{Config: cfg})
		for i := range 100 {
			if r := em.AllowN(fmt.Sprintf("user:%d", i), time.Now(), 1); !r.Allowed || r.Remaining != 4 || r.Window != time.Minute {
				t.Fatalf("%v with two rates on cluster, user:%d: %+v", cfg.Algorithm, i, r)
			}
		}
		// Reset deletes both state keys with one DEL (one slot).
		if err := em.Reset("user:0"); err != nil {
			t.Fatalf("%v with two rates on cluster: Reset: %v", cfg.Algorithm, err)
		}
		if r := em.AllowN("user:0", time.Now(), 5); !r.Allowed || r.Remaining != 0 {
			t.Fatalf("%v with two rates on cluster, after Reset: %+v", cfg.Algorithm, r)
		}
		if st := em.ExactStats(); st.Errors != 0 || st.PolicyDecisions != 0 {
			t.Fatalf("%v with two rates on cluster: %+v", cfg.Algorithm, st)
		}
	}
	twoKeys := 0
	for i, m := range mons {
		for _, cmd := range m.Sync(t) {
			name := strings.ToUpper(cmd[0])
			if name != "EVALSHA" && name != "EVAL" || cmd[2] != "2" || len(cmd) < 5 {
				continue
			}
			if keySlot(cmd[3]) != keySlot(cmd[4]) {
				t.Fatalf("one script call on %s touches slots %d and %d: %q", masters[i], keySlot(cmd[3]), keySlot(cmd[4]), cmd)
			}
			twoKeys++
		}
	}
	if twoKeys < 3*100 {
		t.Errorf("MONITOR saw %d script calls with two keys for 300 decisions", twoKeys)
	}

	// Step 4: failover. Let the replicas catch up first, so the test can
	// demand exact counts.
	for _, m := range masters {
		waitReplicated(t, m)
	}
	promoted := cl.KillMaster(masters[0])
	t.Logf("killed master %s; %s took over", masters[0], promoted)

	pending = items
	deadline = time.Now().Add(30 * time.Second)
	for round := 0; len(pending) > 0; round++ {
		if time.Now().After(deadline) {
			t.Fatalf("%d items still failing 30s after the failover", len(pending))
		}
		out = b.Add(ctxT(t, 5*time.Second), pending, out)
		var again []Item
		outcomes := map[Outcome]int{}
		for i, r := range out {
			outcomes[r.Outcome]++
			if r.Outcome != Applied {
				again = append(again, pending[i])
			}
		}
		if len(again) > 0 {
			var first error
			for _, r := range out {
				if r.Err != nil {
					first = r.Err
					break
				}
			}
			t.Logf("round %d after failover: %v (%v)", round, outcomes, first)
			time.Sleep(100 * time.Millisecond)
		}
		pending = again
	}
	checkCounters(t, client, b, items, 2)

	// A new master has another run_id: Exact takes it for a store that may
	// have lost state and replays its journal, every unit it was granted,
	// before deciding by Redis again. The replicas had caught up, so each
	// key's first unit now counts twice (the stricter side, for one
	// window), and nothing counts less than once: at most 3 remain.
	deadline = time.Now().Add(30 * time.Second)
	for i := 0; i < 300; {
		r := e.AllowN(fmt.Sprintf("user:%d", i), time.Now(), 1)
		if e.State() == Healthy && r.Err == nil && r.Remaining <= 3 {
			i++
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("exact after failover, user:%d: %+v, stats %+v", i, r, e.ExactStats())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// notSettled reports whether err is a refusal of a cluster that is still
// settling (CLUSTERDOWN, TRYAGAIN): the command was not executed.
func notSettled(err error) bool {
	return redis.IsClusterDownError(err) || redis.IsTryAgainError(err)
}

func slicesEqual(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// checkCounters reads every item's counter through the cluster client.
func checkCounters(t *testing.T, c *redis.ClusterClient, b *RedisBackend, items []Item, want int64) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	pipe := c.Pipeline()
	cmds := make([]*redis.StringCmd, len(items))
	for i, it := range items {
		cmds[i] = pipe.HGet(ctx, b.CounterKey(it.Key, it.ID), "t")
	}
	_, _ = pipe.Exec(ctx)
	for i, cmd := range cmds {
		v, err := cmd.Int64()
		if err != nil || v != want {
			t.Fatalf("counter of %s = %v, %v; want %d", items[i].Key, v, err, want)
		}
	}
}

var replOffset = regexp.MustCompile(`offset=(\d+)`)

// waitReplicated waits until every replica of the master at addr has
// acknowledged the master's whole replication stream.
func waitReplicated(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var info string
	for time.Now().Before(deadline) {
		var err error
		info, err = redistest.DoString(addr, "INFO", "replication")
		if err != nil {
			t.Fatal(err)
		}
		var master int64 = -1
		var offsets []int64
		for _, line := range strings.Split(info, "\n") {
			line = strings.TrimSpace(line)
			if v, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
				master, _ = strconv.ParseInt(v, 10, 64)
			}
			if strings.HasPrefix(line, "slave") && strings.Contains(line, "state=online") {
				off := int64(-2)
				if m := replOffset.FindStringSubmatch(line); m != nil {
					off, _ = strconv.ParseInt(m[1], 10, 64)
				}
				offsets = append(offsets, off)
			}
		}
		replicas, caught := len(offsets), 0
		for _, off := range offsets {
			if off == master {
				caught++
			}
		}
		if replicas > 0 && caught == replicas {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("replicas of %s did not catch up within 10s:\n%s", addr, info)
}

// TestNoScriptingPermissionExact: a Redis user whose ACL forbids
// scripting gets NOPERM: Backend items are NotApplied, and Exact decisions
// stay local and correct (5 of 7 admitted, remaining 4..0 then 0, never
// negative), with the errors only in the counters.
func TestNoScriptingPermissionExact(t *testing.T) {
	s := redistest.StartServer(t)
	if _, err := redistest.Do(s.Addr, "ACL", "SETUSER", "noscript", "on", ">pw", "~*", "&*", "+@all", "-@scripting"); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Username: "noscript", Password: "pw", MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	b := newBackend(t, c)
	for _, r := range b.Add(ctxT(t, 5*time.Second), []Item{{Key: "k", ID: 1, Delta: 1, TTL: time.Minute}}, nil) {
		if r.Outcome != NotApplied || !redis.IsPermissionError(r.Err) && !strings.Contains(fmt.Sprint(r.Err), "NOPERM") {
			t.Fatalf("backend item: %+v (%v)", r, r.Err)
		}
	}
	e := newExact(t, c, ExactConfig{Config: fixedCfg(5, time.Minute)})
	now := time.Now()
	for i := range 7 {
		r := e.AllowN("k", now, 1)
		want := max(0, 4-i)
		if r.Err != nil || r.Allowed != (i < 5) || r.Remaining != want {
			t.Fatalf("call %d: %+v", i, r)
		}
	}
	if st := e.ExactStats(); st.Errors != 7 || st.State != Healthy || st.Trips != 0 {
		t.Fatalf("stats %+v", st)
	}
}
