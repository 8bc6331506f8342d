// Package shared is the seam between a limiter and the reconciler of
// package sync: the per-key state a limiter keeps for sharing counts with
// other nodes, and the operations the reconciler performs on it. Package
// shardlimit implements Table and registers its constructor in NewTable.
package shared

// Rate describes one rate (limit and window pair) of a Table as its sync
// state keeps it.
type Rate struct {
	// Window is the rate's window in nanoseconds.
	Window int64
	// Size is the length of one of the rate's sync buckets in nanoseconds:
	// the window for a fixed window, window/n for the sliding counter and
	// log of n buckets.
	Size int64
	// Count is how many buckets a key keeps for the rate: the window's
	// buckets plus the one that straddles the window's start; 1 for a
	// fixed window.
	Count int
}

// Flush is one key's state of one rate handed to the reconciler by
// Collect. Its slices describe the rate's live buckets, oldest first: index
// i is bucket Newest-len(Deltas)+1+i.
type Flush struct {
	// Key is the limiter key.
	Key string
	// Rate is the index of the rate in the Table's Rates.
	Rate int
	// Newest is the id of the key's newest live bucket of the rate:
	// floor(t / size) for the key's latest instant t.
	Newest int64
	// Deltas are the units admitted locally and not yet sent, per bucket.
	// Collect moved them to Sent.
	Deltas []uint32
	// Sent are the units this node has sent for each bucket in total,
	// including Deltas: the floor a store that lost data is healed to.
	Sent []uint32
}

// Table is the side of a limiter its reconciler talks to. All methods are
// safe for concurrent use with the limiter's decisions.
type Table interface {
	// Rates returns the table's rates, longest window first (a Flush's
	// Rate indexes it): one for a limiter of one rate, at most
	// shardlimit.MaxRates. An admitted unit counts in every rate, each with
	// buckets of its own.
	Rates() []Rate
	// Shards returns the number of shards; Collect works on one at a time.
	Shards() int
	// Collect appends to dst, for every key of shard i that had a decision
	// since the last Collect, one Flush per rate (in the order of Rates,
	// one key's Flushes together), moving its deltas to sent. It takes the
	// shard's lock once. Deltas and Sent of the returned Flushes share one
	// backing array per call; one key's Flushes share its Key.
	Collect(i int, dst []Flush) []Flush
	// Apply records the cluster totals of f's buckets of rate f.Rate (same
	// order as f.Deltas; a shorter totals covers the newest buckets) for the
	// buckets the key still keeps: remote = total - sent. Restore and
	// Forget, too, work on the rate f.Rate.
	Apply(f *Flush, totals []int64)
	// Restore gives back f's deltas, which provably did not reach the
	// store, for the buckets the key still keeps; the key is collected again.
	// Deltas it cannot give back (the key was evicted, or the bucket left
	// its rings) are counted dropped.
	Restore(f *Flush)
	// Forget takes f's deltas, which the reconciler dropped unsent (their
	// bucket ended by its clock), out of what the key counts as sent, for
	// the buckets the key still keeps, so no later floor writes them to
	// the store.
	Forget(f *Flush)
	// Touch brings key to instant t (Unix nanoseconds) as a decision of
	// cost 0 would, moving its windows and sync rings forward (never
	// back), and queues it for the next Collect, so the reconciler can
	// read the other nodes' units of the bucket of t for a key that had no
	// decision in it yet. It reports whether the key is stored.
	Touch(key string, t int64) bool
	// Remaining returns how many units rate k (an index into Rates) of key
	// admits at t (Unix nanoseconds), the other nodes' units included, as a
	// peek at t of that rate alone reports them; false if key is not
	// stored. It changes nothing.
	Remaining(key string, t int64, k int) (int, bool)
	// SyncStats returns units whose bucket ended before they were sent
	// (dropped; with several rates, per rate: a unit dropped from two
	// rates counts twice) and the keys with pending state (dirty).
	SyncStats() (dropped uint64, dirty int)
	// SetDefaultLimit and the rest of shardlimit.Limiter are on the same
	// value; the reconciler type-asserts it.
}

// NewTable builds a limiter that keeps sync state for config cfg (a
// shardlimit.Config). It is set by package shardlimit when it is
// initialised; the returned value also implements shardlimit.Limiter.
var NewTable func(cfg any) (Table, error)
