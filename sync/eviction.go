package sync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	stdsync "sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultEvictionCheck is how often a limiter reads its store's eviction
// state when its configuration leaves EvictionCheck zero.
const DefaultEvictionCheck = 2 * time.Second

// Eviction is what a limiter knows of its store's key eviction, read with
// INFO (sections memory and stats) when the limiter starts and then every
// EvictionCheck. See the package doc on eviction.
type Eviction struct {
	// Policy is the store's maxmemory-policy ("noeviction",
	// "allkeys-lru", ...), "" until read. In a Cluster, the first master's
	// that could evict, else "noeviction".
	Policy string
	// MaxMemory is the store's maxmemory in bytes, 0 for none (in a
	// Cluster, the largest of the masters').
	MaxMemory int64
	// Evicted counts the keys the store evicted while this limiter
	// watched it: the growth of INFO evicted_keys (summed over a Cluster's
	// masters) between its checks.
	Evicted uint64
	// Evicting is true when evicted_keys grew between the last two
	// checks: the limiter is then Degraded, with an error wrapping
	// ErrEvicting.
	Evicting bool
	// Err says why eviction is not watched: the store refused INFO (an
	// ACL, a managed Redis that disables it; a redis.Error wrapped with
	// ErrRejected), or the client or Backend cannot run it. It is set once
	// and the limiter stops asking; nil while eviction is watched.
	Err error
}

// Safe reports whether the store cannot evict keys: its policy is
// noeviction, or it has no maxmemory. A store that can evict may delete a
// live counter or state, which every node then reads as a fresh budget.
func (e Eviction) Safe() bool {
	return e.Policy == "noeviction" || e.Policy != "" && e.MaxMemory == 0
}

// evictionInfo is one reading of a store's INFO.
type evictionInfo struct {
	policy    string
	maxMemory int64
	evicted   int64
	runID     string // INFO run_id ("" if absent; a Cluster's sorted and joined)
	uptime    int64  // INFO uptime_in_seconds (-1 if absent; a Cluster's least)
}

// evictionReader is a Backend that can read its store's eviction state:
// RedisBackend.
type evictionReader interface {
	evictionInfo(ctx context.Context) (evictionInfo, error)
}

// errNoInfo is the cause of Eviction.Err for a client that cannot run INFO.
var errNoInfo = errors.New("the client cannot run INFO")

// Clients by how they reach every master with INFO.
type (
	clusterMasters interface {
		ForEachMaster(ctx context.Context, fn func(ctx context.Context, c *redis.Client) error) error
	}
	ringShards interface {
		ForEachShard(ctx context.Context, fn func(ctx context.Context, c *redis.Client) error) error
	}
	infoClient interface {
		Info(ctx context.Context, section ...string) *redis.StringCmd
	}
)

// canReadEviction reports whether readEviction works with c.
func canReadEviction(c RedisClient) bool {
	switch c.(type) {
	case clusterMasters, ringShards, infoClient:
		return true
	}
	return false
}

// readEviction reads the eviction state of the store behind c: of every
// master of a Cluster or shard of a Ring, added up.
func readEviction(ctx context.Context, c RedisClient) (evictionInfo, error) {
	var mu stdsync.Mutex
	var sum evictionInfo
	var ids []string
	sum.uptime = -1
	add := func(ctx context.Context, ic infoClient) error {
		text, err := ic.Info(ctx).Result()
		if err != nil {
			return err
		}
		in, err := parseInfo(text)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		sum.evicted += in.evicted
		sum.maxMemory = max(sum.maxMemory, in.maxMemory)
		ids = append(ids, in.runID)
		if sum.uptime < 0 || in.uptime >= 0 && in.uptime < sum.uptime {
			sum.uptime = in.uptime
		}
		unsafe := in.maxMemory > 0 && in.policy != "noeviction"
		if sum.policy == "" || sum.policy == "noeviction" && unsafe {
			sum.policy = in.policy
		}
		return nil
	}
	each := func(ctx context.Context, c *redis.Client) error { return add(ctx, c) }
	var err error
	switch cc := c.(type) {
	case clusterMasters:
		err = cc.ForEachMaster(ctx, each)
	case ringShards:
		err = cc.ForEachShard(ctx, each)
	case infoClient:
		err = add(ctx, cc)
	default:
		err = errNoInfo
	}
	slices.Sort(ids)
	sum.runID = strings.Join(ids, ",")
	return sum, err
}

// parseInfo reads maxmemory, maxmemory_policy and evicted_keys from the
// text of INFO.
func parseInfo(text string) (evictionInfo, error) {
	in := evictionInfo{maxMemory: -1, evicted: -1, uptime: -1}
	for line := range strings.Lines(text) {
		k, v, ok := strings.Cut(strings.TrimRight(line, "\r\n"), ":")
		if !ok {
			continue
		}
		switch k {
		case "maxmemory_policy":
			in.policy = v
		case "maxmemory":
			in.maxMemory, _ = strconv.ParseInt(v, 10, 64)
		case "evicted_keys":
			in.evicted, _ = strconv.ParseInt(v, 10, 64)
		case "run_id":
			in.runID = v
		case "uptime_in_seconds":
			if u, err := strconv.ParseInt(v, 10, 64); err == nil {
				in.uptime = u
			}
		}
	}
	if in.policy == "" || in.maxMemory < 0 || in.evicted < 0 {
		return in, fmt.Errorf("%w: INFO lacks maxmemory, maxmemory_policy or evicted_keys", ErrBadReply)
	}
	return in, nil
}

// evictionWatch follows a store's evicted_keys from check to check. Safe
// for concurrent use; check is called from one goroutine at a time.
type evictionWatch struct {
	every time.Duration // between checks; 0: not watched

	mu    stdsync.Mutex
	tried time.Time // start of the last check
	last  time.Time // of the last check that read the store
	count int64     // evicted_keys then; -1: none read yet
	st    Eviction

	// The store's identity, to tell a restart (see observe).
	runID     string
	uptime    int64 // -1: not read yet
	restarted bool  // a restart not yet taken (takeRestart)
}

// newEvictionWatch returns a watch checking every interval (negative: never),
// whose store cannot be read if why is not nil.
func newEvictionWatch(interval time.Duration, why error) *evictionWatch {
	w := &evictionWatch{every: max(interval, 0), count: -1, uptime: -1}
	if why != nil && w.every > 0 {
		w.st.Err = fmt.Errorf("eviction not watched: %w", why)
		w.every = 0
	}
	return w
}

// on reports whether the store's eviction is watched.
func (w *evictionWatch) on() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.every > 0
}

// wait returns how long until the next check is due at now (0: now).
func (w *evictionWatch) wait(now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.tried.IsZero() {
		return 0
	}
	return max(0, w.every-now.Sub(w.tried))
}

// evicting reports whether the last check found evictions.
func (w *evictionWatch) evicting() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.st.Evicting
}

// stats returns what the watch knows.
func (w *evictionWatch) stats() Eviction {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.st
}

// check reads the store's eviction state with read and returns an error
// wrapping ErrEvicting if evicted_keys grew since the previous check, nil
// otherwise (also when the state could not be read: an unreachable store
// is the flushes' and calls' business). A store that refuses INFO is
// reported once in Eviction.Err and never asked again.
func (w *evictionWatch) check(ctx context.Context, read func(context.Context) (evictionInfo, error)) error {
	w.mu.Lock()
	on := w.every > 0
	w.tried = time.Now()
	w.mu.Unlock()
	if !on {
		return nil
	}
	in, err := read(ctx)
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		var rerr redis.Error
		if errors.As(err, &rerr) || errors.Is(err, ErrBadReply) || errors.Is(err, errNoInfo) {
			w.st.Err = fmt.Errorf("eviction not watched: %w", storeError(err))
			w.every = 0
			w.st.Evicting = false
		}
		return nil
	}
	w.st.Policy, w.st.MaxMemory = in.policy, in.maxMemory
	w.observeLocked(in)
	grew := in.evicted - w.count
	since := now.Sub(w.last)
	first := w.count < 0
	w.count, w.last = in.evicted, now
	if first || grew <= 0 {
		// The first reading, or none since; a drop is a store that
		// restarted or failed over: a new baseline.
		w.st.Evicting = false
		return nil
	}
	w.st.Evicted += uint64(grew)
	w.st.Evicting = true
	return fmt.Errorf("%w: %d keys evicted in %v (maxmemory-policy %s, maxmemory %d bytes)",
		ErrEvicting, grew, since.Round(time.Millisecond), in.policy, in.maxMemory)
}

// observe records the store's identity read in in and reports whether the
// store restarted since the last reading (its run_id changed or its uptime
// went back: it may have lost every key) and whether that could be told
// (a reading before this one had them).
func (w *evictionWatch) observe(in evictionInfo) (restarted, known bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	known = w.runID != "" || w.uptime >= 0
	return w.observeLocked(in), known
}

// observeLocked is observe; requires w.mu held.
func (w *evictionWatch) observeLocked(in evictionInfo) bool {
	r := w.runID != "" && in.runID != "" && in.runID != w.runID ||
		w.uptime >= 0 && in.uptime >= 0 && in.uptime < w.uptime
	if in.runID != "" {
		w.runID = in.runID
	}
	if in.uptime >= 0 {
		w.uptime = in.uptime
	}
	if r {
		w.restarted = true
	}
	return r
}

// takeRestart reports whether a restart was observed since the last call.
func (w *evictionWatch) takeRestart() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.restarted
	w.restarted = false
	return r
}

// evictionInfo implements evictionReader. It returns when ctx is done
// whatever the client's options.
func (b *RedisBackend) evictionInfo(ctx context.Context) (evictionInfo, error) {
	v, err := call(ctx, func() (any, error) {
		in, err := readEviction(ctx, b.client)
		return in, err
	}, nil)
	in, ok := v.(evictionInfo)
	if err != nil || !ok {
		return evictionInfo{}, err
	}
	return in, nil
}
