package sync

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// TestBanStore checks the BanStore against a redis-server of the test's
// own: a later ban replaces an earlier one and not the reverse, a lift
// removes it, ended bans are neither returned nor kept, a read over the
// limit says it is incomplete, and the set of bans has an expiry.
func TestBanStore(t *testing.T) {
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	s, err := NewBanStore(c, "t:")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now().Truncate(time.Millisecond)
	ns := httplimit.KeyNamespace("r")
	put := func(key string, d time.Duration) {
		t.Helper()
		if err := s.PutBan(ctx, httplimit.StoredBan{Namespace: ns, Key: key, Until: now.Add(d)}, now); err != nil {
			t.Fatal(err)
		}
	}
	put("ip:192.0.2.1", time.Minute)
	put("ip:192.0.2.1", time.Second) // earlier: kept the minute
	put("ip:192.0.2.2", time.Hour)
	put("ip:192.0.2.3", -time.Second) // ended
	bans, complete, err := s.ActiveBans(ctx, now, 10)
	if err != nil || !complete || len(bans) != 2 {
		t.Fatalf("ActiveBans: %+v %v %v", bans, complete, err)
	}
	if b := bans[0]; b.Namespace != ns || b.Key != "ip:192.0.2.1" || !b.Until.Equal(now.Add(time.Minute)) {
		t.Fatalf("first ban %+v", b)
	}
	if n := c.ZCard(ctx, s.Key()).Val(); n != 2 {
		t.Fatalf("%d members kept, want 2 (the ended one removed)", n)
	}
	if ttl := c.PTTL(ctx, s.Key()).Val(); ttl <= time.Hour || ttl > time.Hour+2*time.Minute {
		t.Fatalf("set expires in %v, want a little over an hour", ttl)
	}
	if bans, complete, err := s.ActiveBans(ctx, now, 1); err != nil || complete || len(bans) != 1 {
		t.Fatalf("ActiveBans(limit 1): %+v %v %v", bans, complete, err)
	}
	if err := s.LiftBan(ctx, ns, "ip:192.0.2.2"); err != nil {
		t.Fatal(err)
	}
	if bans, _, _ := s.ActiveBans(ctx, now, 10); len(bans) != 1 {
		t.Fatalf("after a lift: %+v", bans)
	}
	if _, err := NewBanStore(nil, ""); !errors.Is(err, shardlimit.ErrInvalidConfig) {
		t.Errorf("NewBanStore(nil): %v", err)
	}
	if _, err := NewBanStore(c, "a{b"); !errors.Is(err, shardlimit.ErrInvalidConfig) {
		t.Errorf("NewBanStore with a brace: %v", err)
	}
	if err := s.PutBan(ctx, httplimit.StoredBan{Namespace: "x", Key: "k", Until: now}, now); !errors.Is(err, shardlimit.ErrInvalidConfig) {
		t.Errorf("PutBan of a bad namespace: %v", err)
	}
}
