package sync

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

func TestExactInvalid(t *testing.T) {
	c := sharedClient(t)
	bad := []ExactConfig{
		{Config: shardlimit.Config{Algorithm: shardlimit.SlidingLog, Limit: 1, Window: time.Second}},
		{Config: shardlimit.Config{Algorithm: 0, Limit: 1, Window: time.Second}},
		{Config: fixedCfg(1, 1500*time.Nanosecond)},
		{Config: counterCfg(1, 3*time.Microsecond, 2)},
		{Config: fixedCfg(-1, time.Second)},
		{Config: fixedCfg(1, 0)},
		{Config: fixedCfg(1, time.Second), Prefix: "a{b"},
		{Config: fixedCfg(1, time.Second), Timeout: time.Microsecond},
		{Config: fixedCfg(1, time.Second), Policy: 7},
		{Config: fixedCfg(1, time.Second), ProbeInterval: time.Second, MaxProbeInterval: time.Millisecond},
		{Config: fixedCfg(1, time.Second), DegradeAfter: -time.Second},
		{Config: fixedCfg(1, time.Second), DegradeAfter: 2 * time.Minute},
	}
	for i, cfg := range bad {
		if e, err := NewExact(c, cfg); !errors.Is(err, shardlimit.ErrInvalidConfig) {
			if e != nil {
				e.Close()
			}
			t.Errorf("config %d: err %v, want ErrInvalidConfig", i, err)
		}
	}
	if _, err := NewExact(nil, ExactConfig{Config: fixedCfg(1, time.Second)}); !errors.Is(err, shardlimit.ErrInvalidConfig) {
		t.Errorf("nil client: %v", err)
	}
	e := newExact(t, c, ExactConfig{Config: fixedCfg(1, time.Second)})
	for _, key := range []string{"", strings.Repeat("k", shardlimit.DefaultMaxKeyBytes+1)} {
		if r := e.AllowN(key, time.Now(), 1); !errors.Is(r.Err, shardlimit.ErrInvalidKey) || r.Allowed {
			t.Errorf("key of %d bytes: %+v", len(key), r)
		}
		if err := e.SetLimit(key, 1); !errors.Is(err, shardlimit.ErrInvalidKey) {
			t.Errorf("SetLimit key of %d bytes: %v", len(key), err)
		}
	}
	if err := e.SetDefaultLimit(shardlimit.MaxLimit + 1); !errors.Is(err, shardlimit.ErrInvalidConfig) {
		t.Errorf("SetDefaultLimit too large: %v", err)
	}
	cfg := e.Config()
	if cfg.Algorithm != shardlimit.FixedWindow || cfg.Limit != 1 || cfg.MaxKeyBytes != shardlimit.DefaultMaxKeyBytes || cfg.Clock == nil {
		t.Errorf("Config() = %+v", cfg)
	}
}

// TestExactResetAndDefaultLimit: Reset clears the shared state for every
// process; SetDefaultLimit applies at once. (b has no deny cache: a Reset
// by another process does not reach the cache, see
// TestExactDenyCacheOtherProcessReset.)
func TestExactResetAndDefaultLimit(t *testing.T) {
	c := sharedClient(t)
	prefix := redistest.Prefix(t)
	a := newExact(t, c, ExactConfig{Config: gcraCfg(2, time.Minute), Prefix: prefix})
	b := newExact(t, c, ExactConfig{Config: gcraCfg(2, time.Minute), Prefix: prefix, DenyCacheKeys: -1})
	a.Allow("k")
	b.Allow("k")
	if a.Allow("k") || b.Allow("k") {
		t.Fatal("two processes admitted more than the shared limit")
	}
	if err := a.Reset("k"); err != nil {
		t.Fatal(err)
	}
	if !b.Allow("k") {
		t.Fatal("Reset by one process did not clear the shared state")
	}
	if err := b.SetDefaultLimit(3); err != nil {
		t.Fatal(err)
	}
	if r := b.AllowN("k", time.Now(), 1); !r.Allowed || r.Limit != 3 {
		t.Fatalf("after SetDefaultLimit(3): %+v", r)
	}
	if st := b.Stats(); st.Allowed != 3 || st.Denied != 1 || st.Keys != 1 {
		t.Fatalf("Stats = %+v", st)
	}
}

// TestExactCloseIdempotent: Close is idempotent, stops the probe (goleak
// in TestMain checks no goroutine is left), later calls answer ErrClosed
// without panicking, and nothing reaches Redis after Close returns.
func TestExactCloseIdempotent(t *testing.T) {
	s := redistest.StartServer(t)
	c := newClient(t, s.Addr)
	e, err := NewExact(c, ExactConfig{Config: counterCfg(5, time.Second, 10), Prefix: "close:"})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		e.Allow("k")
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	m := redistest.StartMonitor(t, s.Addr)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if r := e.AllowN("k", time.Now(), 1); !errors.Is(r.Err, shardlimit.ErrClosed) || r.Allowed {
		t.Fatalf("after Close: %+v", r)
	}
	if e.Allow("k") || e.Peek("k", time.Now(), 1).Err == nil {
		t.Fatal("after Close: allowed or no error")
	}
	if err := e.Reset("k"); !errors.Is(err, shardlimit.ErrClosed) {
		t.Fatalf("Reset after Close: %v", err)
	}
	if err := e.SetLimit("k", 1); !errors.Is(err, shardlimit.ErrClosed) {
		t.Fatalf("SetLimit after Close: %v", err)
	}
	for _, cmd := range m.Sync(t) {
		for _, a := range cmd {
			if strings.Contains(a, "close:") || strings.EqualFold(a, "evalsha") {
				t.Fatalf("command after Close: %q", cmd)
			}
		}
	}
}

// TestExactDenialWritesNothing: a denied request and a peek write nothing
// (MONITOR shows the commands scripts run), and the state an admission
// wrote has a TTL.
func TestExactDenialWritesNothing(t *testing.T) {
	s := redistest.StartServer(t)
	c := newClient(t, s.Addr)
	ctx := ctxT(t, 5*time.Second)
	for _, cfg := range []shardlimit.Config{fixedCfg(1, time.Minute), counterCfg(1, time.Minute, 6), gcraCfg(1, time.Minute)} {
		e := newExact(t, c, ExactConfig{Config: cfg})
		e.callerTime = true
		now := at(time.Second)
		e.AllowN("k", now, 1)
		m := redistest.StartMonitor(t, s.Addr)
		for range 3 {
			if e.AllowN("k", now, 1).Allowed {
				t.Fatalf("%v: over limit", cfg.Algorithm)
			}
		}
		e.Peek("k", now, 1)
		e.Peek("fresh", now, 1)
		cmds := m.Sync(t)
		m.Stop()
		if len(cmds) < 4 {
			t.Fatalf("%v: MONITOR saw only %q", cfg.Algorithm, cmds)
		}
		for _, cmd := range cmds {
			switch strings.ToUpper(cmd[0]) {
			case "HSET", "HINCRBY", "SET", "PEXPIRE", "HDEL", "DEL":
				t.Fatalf("%v: a denial or peek wrote: %q", cfg.Algorithm, cmd)
			}
		}
		if ttl := c.PTTL(ctx, e.StateKeys("k")[0]).Val(); ttl <= 0 {
			t.Fatalf("%v: state key PTTL %v", cfg.Algorithm, ttl)
		}
		if c.Exists(ctx, e.StateKeys("fresh")[0]).Val() != 0 {
			t.Fatalf("%v: Peek created a key", cfg.Algorithm)
		}
	}
}
