package sync

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardlimit/shardlimit"
)

// MaxSpan is the largest Item.Span: the largest bucket count of a sliding
// window counter, so that one call can read all n+1 buckets that overlap a
// window of shardlimit.MaxBuckets buckets.
const MaxSpan = shardlimit.MaxBuckets

// MaxNodeBytes is the longest accepted Item.Node.
const MaxNodeBytes = 64

// Item is one operation of a batch sent to a Backend: add Delta units to
// the counter of window or bucket ID of limiter Key (of its rate of window
// Window, for a limiter of several rates), keep it for TTL, and read back
// its total (and, with Span, the totals of the Span counters before it).
type Item struct {
	// Key is the limiter key: 1 to shardlimit.MaxKeyBytesLimit bytes.
	Key string
	// Window is 0 for a limiter of one rate. For a limiter of several
	// rates (shardlimit.Config.Rates) it is the window of the rate whose
	// counter the Item names, a positive whole number of microseconds: each
	// rate has counters of its own, which a Backend must keep apart (a
	// RedisBackend names them <prefix>{<key>}:sh:<window in µs>:<id>).
	Window time.Duration
	// ID is the window or bucket id, usually floor(unix_nanos / length).
	ID int64
	// Delta is the number of units to add; 0 adds nothing and writes
	// nothing (unless Floor heals the counter), so an Item with Delta 0 is a
	// read.
	Delta uint32
	// Node names the writer whose units Delta and Floor are: the store
	// keeps each node's contribution to a counter apart, and the counter's
	// total is their sum. A Shared limiter uses a random id of its own, 16
	// hex digits. At most MaxNodeBytes bytes; "" is a node like any other.
	Node string
	// Floor, if positive, raises Node's contribution to the counter to at
	// least Floor after Delta is added, and the total by as much. The
	// reconciler passes the units this node has contributed to the window
	// in total, so a store that lost the counter (restarted empty, failed
	// over before replicating, evicted it) is healed from what each node
	// already sent: once every node has flushed again the total is the sum
	// of their contributions. In [0, 2^53).
	Floor int64
	// Seq, if positive, names this write of Node's so that it adds Delta
	// at most once: the store keeps, with the counter, the highest Seq of
	// Node whose Delta it added, and adds Delta only for a higher Seq
	// (Floor applies either way). A client that sends a command again
	// after losing its reply (go-redis Options.MaxRetries, a
	// ClusterClient's redirects and retries) then counts Delta once, and
	// so does a late copy of an older write. Give each write of a node a
	// higher Seq than the last, with Floor the node's whole share, as the
	// Shared limiter does (it numbers its flushes): a write skipped
	// because a later one was applied first is then covered by the later
	// one's Floor. 0 adds Delta every time. In [0, 2^53).
	Seq int64
	// TTL is how long the counter is kept after this write, at least one
	// millisecond (rounded up to whole milliseconds). Every write sets it:
	// no counter is ever stored without an expiry.
	TTL time.Duration
	// Span is how many counters before ID (IDs ID-Span .. ID-1) to read
	// back as well, in [0, MaxSpan]; a sliding window counter of n buckets
	// reads n to see every bucket of its window. The reads and the write are
	// one atomic step.
	Span int
}

// Outcome says whether the store applied an Item.
type Outcome uint8

const (
	// MaybeApplied (the zero value) means nothing is proven: the command was
	// sent and its reply was lost (a timeout, a broken connection) or could
	// not be decoded. Sending the Item again may count Delta twice, unless
	// it is sent with the same positive Seq; sending Floor alone (Delta 0)
	// never does.
	MaybeApplied Outcome = iota
	// Applied means the store applied the Item; Total and Totals are valid.
	Applied
	// NotApplied means the Item provably changed nothing: it was invalid, it
	// was never sent (the client reported a dial error, a closed client or
	// an exhausted pool, or ctx was done before Add began; a RedisBackend
	// whose client sends commands again after a failure, see
	// NewRedisBackend, reports such an error as MaybeApplied, since an
	// earlier attempt may have reached the store), or the store
	// answered with an error reply, which every script gives only before its
	// first write. Retrying cannot count Delta twice. (go-redis dials in the
	// background: a deadline that passes while it is still dialling is
	// reported as the context's error, hence MaybeApplied.)
	NotApplied
)

// String returns "maybe_applied", "applied" or "not_applied".
func (o Outcome) String() string {
	switch o {
	case Applied:
		return "applied"
	case NotApplied:
		return "not_applied"
	}
	return "maybe_applied"
}

// ItemResult is the result of one Item.
type ItemResult struct {
	// Outcome says whether the Item was applied.
	Outcome Outcome
	// Total is the counter of ID after the Item, summed over every node that
	// wrote it; valid when Outcome is Applied.
	Total int64
	// Totals holds the totals of IDs ID-Span .. ID, oldest first (so its
	// last element is Total); valid when Outcome is Applied. Add reuses the
	// capacity of the slice it finds at the same index of out.
	Totals []int64
	// Err is nil when Outcome is Applied, else the reason: an error
	// wrapping ErrInvalidItem or shardlimit.ErrInvalidKey, a go-redis error
	// (a connection error, a context error, a Redis error reply such as
	// CROSSSLOT or NOPERM), or an error wrapping ErrBadReply.
	Err error
}

// Backend is the shared store the reconciler reaches. RedisBackend is the
// implementation shipped; another store can be plugged in by implementing
// these three methods. Implementations must be safe for concurrent use and
// must never panic on what the store answers.
type Backend interface {
	// Add applies every item, each atomically (increment unless Seq says
	// it was applied, floor and expiry in one step), and returns one
	// ItemResult per item, in order, appended to out[:0]. Items are
	// independent: one failing does not fail the others. Add returns when
	// every item has a result or ctx is done. A Backend that ignores Seq
	// still works, but counts an item its transport sent twice twice.
	Add(ctx context.Context, items []Item, out []ItemResult) []ItemResult
	// Read returns the totals of the counters of key for IDs id-span .. id,
	// oldest first, appended to dst[:0], reading them in one atomic step and
	// writing nothing. span is in [0, MaxSpan]. It reads the counters of a
	// limiter of one rate (Item.Window 0); an Item of Delta 0 reads those
	// of any rate.
	Read(ctx context.Context, key string, id int64, span int, dst []int64) ([]int64, error)
	// Time returns the store's clock, for estimating this node's offset to
	// it.
	Time(ctx context.Context) (time.Time, error)
}

// RedisClient is the part of redis.UniversalClient this package uses.
// *redis.Client (single node or Sentinel failover), *redis.ClusterClient,
// *redis.Ring and every redis.UniversalClient satisfy it.
type RedisClient interface {
	// Scripter runs the Lua scripts: EVALSHA, then EVAL when the store
	// does not hold the script.
	redis.Scripter
	// Pipeline returns a pipeline: each batch's scripts are sent in one.
	Pipeline() redis.Pipeliner
	// Ping checks that the store answers (Exact's health probe).
	Ping(ctx context.Context) *redis.StatusCmd
	// Time returns the store's clock (TIME), for this node's offset to it.
	Time(ctx context.Context) *redis.TimeCmd
	// Del deletes keys (Exact's Reset of a key's counters).
	Del(ctx context.Context, keys ...string) *redis.IntCmd
}

// RedisBackend is the Backend over go-redis v9: all items of a batch in one
// pipeline of EVALSHA calls of a Lua script, each call carrying up to
// MaxScriptItems items (and MaxScriptKeys Redis keys) as one atomic step,
// so that a flush of many keys costs the store a few script calls, not one
// per key. Which items share a call depends on the client: a *redis.Client
// (one server, or Sentinel's current master) takes any keys in one call; a
// *redis.ClusterClient, whose calls go to the master of their keys' slot,
// only keys of one hash slot (the items are grouped by slot, and every key
// of one limiter key has the same hash tag); any other client (a
// *redis.Ring, which shards by key) only the items of one limiter key.
// Each item is applied, or refused, on its own, as if it were sent alone.
// RedisBackend is safe for concurrent use and needs no Close (the client
// stays the caller's); each call runs its Redis commands on a goroutine of
// its own that outlives the call only when ctx ends first (see Add).
type RedisBackend struct {
	client RedisClient
	prefix string
	// perScript is the most items one script call carries (0:
	// MaxScriptItems); tests set it
	perScript int
	// resends: the client may send a command again after a failure
	// (see resends); its last attempt's error then proves nothing
	resends bool
}

var _ Backend = (*RedisBackend)(nil)

// NewRedisBackend returns a RedisBackend that writes keys under prefix (""
// means DefaultPrefix) through client. It does no I/O. It reads whether
// client sends a command again after a failure (a *redis.Client or
// *redis.Ring with Options.MaxRetries above 0, every *redis.ClusterClient,
// and any client of another type): if so, a dial error on the last
// attempt does not prove an Item unapplied (see NotApplied). It returns an error
// wrapping shardlimit.ErrInvalidConfig if client is nil or prefix contains a
// brace or is longer than MaxPrefixBytes.
func NewRedisBackend(client RedisClient, prefix string) (*RedisBackend, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil redis client", shardlimit.ErrInvalidConfig)
	}
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := checkPrefix(prefix); err != nil {
		return nil, err
	}
	return &RedisBackend{client: client, prefix: prefix, resends: resends(client)}, nil
}

// resends reports whether client may send a command again after a
// connection error or a redirect: a Client or Ring with retries (go-redis
// Options.MaxRetries, 3 unless -1), every ClusterClient (it follows
// redirects and retries on network errors whatever MaxRetries says), and
// every client of another kind, which this package cannot inspect.
func resends(client RedisClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().MaxRetries > 0
	case *redis.Ring:
		return c.Options().MaxRetries > 0
	}
	return true
}

// CounterKey returns the Redis key holding the counter of window or bucket
// id of limiter key: <prefix>{<key>}:sh:<id>, or <prefix>#{<hex of
// key>}:sh:<id> for a key containing a brace. The counter is a hash: field
// t holds the total and field n:<node> each node's contribution (see
// Item.Node).
func (b *RedisBackend) CounterKey(key string, id int64) string {
	return counterKey(tagged(b.prefix, key), 0, id)
}

// RateCounterKey returns the Redis key holding the counter of window or
// bucket id of limiter key's rate of window w (Item.Window), for a limiter
// of several rates: <prefix>{<key>}:sh:<w in microseconds>:<id> (the key
// hex-encoded after '#' if it has a brace). For w = 0 it is CounterKey.
func (b *RedisBackend) RateCounterKey(key string, w time.Duration, id int64) string {
	return counterKey(tagged(b.prefix, key), w, id)
}

// checkItem validates an item before it is sent.
func checkItem(it *Item) error {
	switch {
	case len(it.Key) == 0:
		return fmt.Errorf("%w: empty key", shardlimit.ErrInvalidKey)
	case len(it.Key) > shardlimit.MaxKeyBytesLimit:
		return fmt.Errorf("%w: key of %d bytes is longer than %d", shardlimit.ErrInvalidKey, len(it.Key), shardlimit.MaxKeyBytesLimit)
	case it.Window < 0 || it.Window%time.Microsecond != 0:
		return fmt.Errorf("%w: window %v is not a whole number of microseconds", ErrInvalidItem, it.Window)
	case it.TTL < time.Millisecond:
		return fmt.Errorf("%w: ttl %v is below 1ms", ErrInvalidItem, it.TTL)
	case it.Span < 0 || it.Span > MaxSpan:
		return fmt.Errorf("%w: span %d outside [0, %d]", ErrInvalidItem, it.Span, MaxSpan)
	case len(it.Node) > MaxNodeBytes:
		return fmt.Errorf("%w: node of %d bytes is longer than %d", ErrInvalidItem, len(it.Node), MaxNodeBytes)
	case it.Floor < 0 || it.Floor >= 1<<53:
		return fmt.Errorf("%w: floor %d outside [0, 2^53)", ErrInvalidItem, it.Floor)
	case it.Seq < 0 || it.Seq >= 1<<53:
		return fmt.Errorf("%w: seq %d outside [0, 2^53)", ErrInvalidItem, it.Seq)
	}
	return nil
}

// Add implements Backend. The items are sent as one pipeline of EVALSHA
// calls, each carrying up to MaxScriptItems items whose keys the client
// lets one call name (see RedisBackend); calls answered NOSCRIPT (a store
// restarted or its script cache flushed) are sent again with EVAL, which
// also loads the script. go-redis's Script.Run cannot do this inside a
// pipeline, where a command's error is only known after Exec.
//
// Add returns when ctx is done even if the client does not honour context
// deadlines on its sockets (go-redis Options.ContextTimeoutEnabled is false
// by default): the items still in flight are then MaybeApplied with ctx's
// error, and the abandoned pipeline ends by the client's own ReadTimeout and
// WriteTimeout. Set ContextTimeoutEnabled to true so that it ends at ctx's
// deadline too.
func (b *RedisBackend) Add(ctx context.Context, items []Item, out []ItemResult) []ItemResult {
	out = sizeResults(out, len(items))
	addParts(ctx, b.client, []addPart{{b: b, items: items, out: out}})
	return out
}

// sizeResults returns out[:n], reallocated if too small, with every
// element reset but its Totals capacity.
func sizeResults(out []ItemResult, n int) []ItemResult {
	if cap(out) < n {
		out = append(out[:cap(out)], make([]ItemResult, n-cap(out))...)
	}
	out = out[:n]
	for i := range out {
		out[i] = ItemResult{Totals: out[i].Totals[:0]}
	}
	return out
}

// decodeTotals checks that v, one item's element of addScript's reply, holds
// n non-negative integers (a bare integer if n is 1, else an array of n)
// and appends them to dst.
func decodeTotals(v any, n int, dst []int64) ([]int64, error) {
	if n == 1 {
		x, ok := v.(int64)
		if !ok || x < 0 {
			return dst, fmt.Errorf("%w: got %v (%T), want a non-negative integer", ErrBadReply, v, v)
		}
		return append(dst, x), nil
	}
	arr, ok := v.([]any)
	if !ok {
		return dst, fmt.Errorf("%w: got %T, want an array", ErrBadReply, v)
	}
	if len(arr) != n {
		return dst, fmt.Errorf("%w: got %d totals, want %d", ErrBadReply, len(arr), n)
	}
	for _, e := range arr {
		x, ok := e.(int64)
		if !ok || x < 0 {
			return dst, fmt.Errorf("%w: total %v (%T) is not a non-negative integer", ErrBadReply, e, e)
		}
		dst = append(dst, x)
	}
	return dst, nil
}

// Time implements Backend with the TIME command (in a Cluster, of any
// node). It returns when ctx is done whatever the client's options.
func (b *RedisBackend) Time(ctx context.Context) (time.Time, error) {
	v, err := call(ctx, func() (any, error) { return b.client.Time(ctx).Result() }, nil)
	if err != nil {
		return time.Time{}, err
	}
	t, ok := v.(time.Time)
	if !ok || t.IsZero() {
		return time.Time{}, fmt.Errorf("%w: TIME gave %v", ErrBadReply, v)
	}
	return t, nil
}

// isNoScript reports whether err is Redis's NOSCRIPT reply to EVALSHA.
func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// classify returns the Outcome that err proves for a command that failed
// with it.
func classify(err error) Outcome {
	if errors.Is(err, ErrBadReply) {
		return MaybeApplied
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		// The store answered: a Redis error reply is given only before a
		// script's first write (see scripts.go), and a rejected command
		// (CROSSSLOT, NOPERM, READONLY, CLUSTERDOWN, ...) never ran.
		return NotApplied
	}
	if neverSent(err) {
		return NotApplied
	}
	return MaybeApplied
}

// neverSent reports whether err proves that no byte of the command reached
// the store: no connection could be made, or the client is closed.
func neverSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted)
}

// topologyReloader is implemented by *redis.ClusterClient.
type topologyReloader interface {
	ReloadState(ctx context.Context)
}

// refreshTopology asks a Cluster client to reload its slot map in the
// background when a command failed with a transport error: a go-redis
// pipeline does not do it itself, and without it every command for the
// slots of a master that was failed over keeps going to the dead address.
func refreshTopology(c RedisClient, cmds []*redis.Cmd) {
	r, ok := c.(topologyReloader)
	if !ok {
		return
	}
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil && transportError(err) {
			r.ReloadState(context.Background())
			return
		}
	}
}

// transportError reports whether err is a failure to talk to the store (as
// opposed to an answer from it, such as an error reply or garbage).
func transportError(err error) bool {
	var rerr redis.Error
	return !errors.As(err, &rerr) && !errors.Is(err, ErrBadReply) &&
		!errors.Is(err, context.Canceled)
}
