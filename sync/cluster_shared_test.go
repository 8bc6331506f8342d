package sync

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// TestCaseB23SharedCluster is CASES.md B23 for Shared on a local 6-node
// Redis Cluster (3 masters, 3 replicas; fixed window, limit 100, W = 60 s):
//
//  1. one Allow for each of user:0 .. user:999, then two flushes: zero item
//     errors, the script calls reached every master, and every key's
//     counter is 1;
//  2. a master is killed, then every key takes a second unit while the
//     reconciler keeps flushing: the flushes for the dead master's slots
//     fail until a replica has taken over, then recover on their own, and
//     every counter becomes exactly 2 (items never sent are retried;
//     items whose reply was lost are healed by the floor, never counted
//     twice).
func TestCaseB23SharedCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 cl.Addrs,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
		DialerRetries:         1,
		ReadTimeout:           2 * time.Second,
		WriteTimeout:          2 * time.Second,
	})
	t.Cleanup(func() { _ = client.Close() })
	clock := shardlimit.NewManualClock(at(time.Second))
	now := clock.Now()
	s := newShared(t, client, SharedConfig{
		Config:        shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 100, Window: time.Minute, Clock: clock},
		FlushInterval: 50 * time.Millisecond,
		FlushTimeout:  5 * time.Second, // a fresh cluster on a loaded machine may be slow; a dead master refuses at once
	})
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
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

	for _, k := range keys {
		if r := s.AllowN(k, now, 1); !r.Allowed || r.Remaining != 99 {
			t.Fatalf("%s: %+v", k, r)
		}
	}
	mustFlush(t, s)
	mustFlush(t, s)
	if st := s.SharedStats(); st.ItemErrors != 0 || st.Items != uint64(len(keys)) || st.SentUnits != uint64(len(keys)) {
		t.Fatalf("stats after two flushes %+v", st)
	}
	for i, v := range counters(t, client, s, keys, id) {
		if v != 1 {
			t.Fatalf("counter of %s = %d, want 1", keys[i], v)
		}
	}
	// The eviction watch reads INFO of every master.
	eventually(t, 10*time.Second, func() string {
		if ev := s.SharedStats().Eviction; ev.Policy != "noeviction" || !ev.Safe() || ev.Err != nil {
			return fmt.Sprintf("eviction %+v", ev)
		}
		return ""
	})
	for i, m := range mons {
		calls, infos := 0, 0
		for _, cmd := range m.Sync(t) {
			switch name := strings.ToUpper(cmd[0]); name {
			case "EVALSHA", "EVAL":
				calls++
			case "INFO":
				infos++
			}
		}
		if calls == 0 || infos == 0 {
			t.Errorf("master %s got %d script calls and %d INFO", masters[i], calls, infos)
		}
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
	}
	t.Logf("killed master %s; %s took over", masters[0], awaitTakeover())
	eventually(t, 30*time.Second, func() string {
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
	st := s.SharedStats()
	t.Logf("stats after the failover %+v", st)
	if st.ItemErrors == 0 {
		t.Error("no item failed while a master was dead: the test did not test the failover")
	}
}
