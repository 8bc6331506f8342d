package sync

import (
	stdsync "sync"
	"sync/atomic"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/core"
)

// Shared is a shardlimit.Limiter whose counts are shared, approximately,
// with every other process using the same store. Each request is decided in
// this process, with no round trip: a key's local units plus the other
// nodes' units last read from the store must fit the limit. The reconciler,
// every FlushInterval, on the background goroutine the limiter shares with
// every limiter of its store (see the package doc), collects the keys decided since the last
// flush shard by shard, sends one atomic increment-and-expire per key and
// bucket in pipelines of at most MaxBatch, many of them per script call
// (see RedisBackend), and reads back the cluster's totals; at most one
// flush is in flight.
//
// Accuracy: at every flush a node reads the store's totals of the keys it
// decided since its last flush and of the keys near their limit, decided
// or not: keys the other nodes admitted units of whose room left is at
// most twice what the others admit per unit this node admits, plus one (at
// most one more read per such key and flush). For those keys it sees the
// others at most D = 2*(T + d) late, T the flush interval (on a loaded
// machine, what SharedStats.MaxFlushGap reports) and d a flush's round
// trip, at any request rate; a window then admits at most the limit L plus
// what the other nodes admitted in the D before this node's last admission
// in it: with N nodes each offered R units/s, min(N*L, L + (N-1)*R*D),
// plus units lost to store faults. With several rates (Config.Rates) each
// rate is shared with counters of its own and holds its own bound: rate
// k's window admits at most min(N*L_k, L_k + (N-1)*R*D), a request any
// rate denies consumes from none, and a key is near its limit when any of
// its rates is. A key this node has not admitted in its window (idle here)
// is brought up to date by the flush after its next decision: its first
// decisions after the gap can overshoot by what the others admitted
// meanwhile. With one node it is exactly the local
// algorithm. The fixed window shares its window's count; the sliding
// counter its buckets'; the sliding log keeps its exact local log and adds
// the other nodes' units by Buckets sub-windows, weighted as the counter
// does.
//
// Failures: decisions never wait for the store. A flush that provably did
// not reach the store is retried; one whose reply was lost is healed at the
// next flush, which raises this node's share of the store's counter to at
// least what this node sent. The store keeps each node's share apart (see
// the package doc on Redis keys), so a counter it lost (restarted empty,
// evicted) comes back, once every node has flushed the key again, as the
// sum of what all of them sent; units of buckets that ended first are
// dropped and counted. Meanwhile a node keeps counting the other nodes'
// units it had read: the others' units of a live window or bucket only
// grow, so it keeps the most it has read. A flush sent twice by the
// client (go-redis retries) counts once (Item.Seq). After FailAfter failed
// flushes in a row the limiter is Degraded, decides by Policy, and
// flushes with back-off until the store answers. It is Degraded too while
// the store evicts keys, for an EvictionCheck after a flush read a counter
// short of the others' units it had read (the store lost them), and while
// more than DegradePercent of the items of its flushes fail (see the
// package doc on health and eviction). Under FallbackLocal with FallbackLimit F per
// node, a window an outage overlaps admits at most max(L, N*F) + N*N*R*(D
// + Δ) + N*R*D, Δ the time the nodes take to turn Degraded: about L with
// F = L/N (see the package doc on outages).
//
// All methods are safe for concurrent use. Close (or Shutdown with a
// deadline) leaves the background goroutine (stopping it if this was the
// store's last limiter), flushes once and closes the local limiter.
type Shared struct {
	core     core.Synced // the local limiter, with the sync state
	tab      core.Synced // core, as the reconciler uses it
	backend  Backend
	node     string // this limiter's Item.Node: 16 random hex digits
	clock    shardlimit.Clock
	interval time.Duration
	timeout  time.Duration
	maxBatch int
	failMax  int
	policy   FailurePolicy
	fbLimits []int // the default limits while Degraded (FallbackLocal), nil for none
	onChange func(StateChange)
	alg      shardlimit.Algorithm
	rates    []core.SyncRate // the limiter's rates, longest window first
	hub      *hub            // the store's background (see hub)

	// how often the hub reads the store's eviction state for it (0: never)
	evictEvery time.Duration

	defMu     stdsync.Mutex
	defLimits []int // the configured default limits, as Config.Rates (not the fallback)

	state    atomic.Int32
	flushMu  stdsync.Mutex // one flush at a time (the loop and Shutdown)
	failures int           // flushes failed in a row; under flushMu
	seq      int64         // the last flush's Item.Seq; under flushMu
	evicting error         // the store is evicting keys; under flushMu
	// the store lost units this node had read (see lose): Degraded until
	// lossUntil; under flushMu
	lossErr   error
	lossUntil time.Time
	share     *shareWatch // the failure share; under flushMu

	// the hub's schedule of this limiter; the hub's goroutine only
	next, lastStart time.Time
	backoff         time.Duration

	// keys near their limit at the last flush, read at the next; under
	// flushMu
	near []string
	// keys (also in near) whose older buckets the store lost: the next
	// flush heals every bucket this node sent units of; under flushMu
	healing map[string]bool

	// what quiet reads without flushMu: near is not empty, failures > 0;
	// and lossErr is set
	hasNear, failing, lossy atomic.Bool
	// the hub visits it (see hub.activateShared); it left the hub
	active, left atomic.Bool

	// scratch, reused by flushes under flushMu
	flushes []core.Flush
	items   []Item
	owners  []owner
	results []ItemResult

	flushCount, failedFlushes, itemCount, itemErrs atomic.Uint64
	badReplies                                     atomic.Uint64
	lastErr                                        lastError
	sentUnits, retried, unknown, dropped           atomic.Uint64
	lostUnits, losses                              atomic.Uint64
	trips, recoveries                              atomic.Uint64
	lastKeys, lastNear                             atomic.Int64
	lastLatency, maxLatency                        atomic.Int64
	maxGap                                         atomic.Int64

	closed    atomic.Bool
	closing   closeSignal // cancelled when Close begins, for WaitN
	closeOnce stdsync.Once
	closeErr  error
}

// owner ties an item to its flush and bucket index.
type owner struct {
	flush, bucket int
}

var _ shardlimit.Limiter = (*Shared)(nil)

// degraded reports whether decisions follow FailOpen or FailClosed now.
func (s *Shared) degraded() bool {
	return s.policy != FallbackLocal && State(s.state.Load()) == Degraded
}

// byPolicy decides n units under FailOpen or FailClosed.
func (s *Shared) byPolicy(key string, now time.Time, n int) shardlimit.Result {
	r := shardlimit.Result(s.core.Peek(key, now, 0))
	if r.Err != nil {
		return r
	}
	if n < 0 {
		return shardlimit.Result{Err: shardlimit.ErrInvalidCost}
	}
	switch {
	case n == 0:
		r.Allowed = true
	case n > r.Limit || len(s.rates) > 1 && s.core.Peek(key, now, n).RetryAfter == shardlimit.Never:
		// No wait can admit it (above a rate's limit).
		r.Allowed, r.RetryAfter = false, shardlimit.Never
	case s.policy == FailOpen:
		r.Allowed, r.Remaining = true, r.Limit-n
	default:
		r.Allowed, r.RetryAfter = false, s.interval
	}
	return r
}

// The decision spellings of Shared and Exact (decisions_gen.go) are
// written from one template each: Shared's decide by byPolicy while
// Degraded and by the local limiter's same spelling otherwise; Exact's all
// call decide.

//go:generate go run ../internal/gen/decisions -pkg sync
//go:generate go run ../internal/gen/configconv -pkg sync

// Peek reports what AllowN(key, now, n) would decide, consuming nothing.
func (s *Shared) Peek(key string, now time.Time, n int) shardlimit.Result {
	return shardlimit.Result(s.core.Peek(key, now, n))
}
