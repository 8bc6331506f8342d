package sync

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Bounds of one script call of a RedisBackend (see RedisBackend). A call
// holds the store for its items only (a few microseconds of Redis time per
// item), so these keep every call short while sparing the store the cost
// of a script call per item.
const (
	// MaxScriptItems is the most Items one script call carries.
	MaxScriptItems = 128
	// MaxScriptKeys is the most Redis keys one script call names, unless
	// one Item alone names more (a sliding window counter of many buckets
	// read with Span): such an Item goes in a call of its own.
	MaxScriptKeys = 1024
)

// keyRoute says which items a client lets one script call carry.
type keyRoute uint8

const (
	routeAny  keyRoute = iota // one server: any keys
	routeSlot                 // Redis Cluster: keys of one hash slot
	routeTag                  // any other client: keys of one hash tag
)

// routeOf returns the keyRoute of client.
func routeOf(client RedisClient) keyRoute {
	switch client.(type) {
	case *redis.Client:
		return routeAny
	case *redis.ClusterClient:
		return routeSlot
	}
	return routeTag
}

// addPart is the items of one RedisBackend in a pipeline that may carry
// the items of several (the flushes of several Shared limiters on one
// client): out has one reset result per item (see sizeResults).
type addPart struct {
	b     *RedisBackend
	items []Item
	out   []ItemResult
}

// pending is one item of a batch on its way to Redis. execBatch owns it
// once started: addParts never reads it again if it stops waiting.
type pending struct {
	part  int    // in parts
	idx   int    // in the part's items
	tag   string // the hash tag of its keys
	nkeys int    // its Redis keys: 1 + Span
	res   ItemResult
}

// scriptCall is one call of addScript: the items of batch at idx, their
// keys and arguments in turn (see add).
type scriptCall struct {
	idx  []int
	keys []string
	args []any
	cmd  *redis.Cmd
	// the group of items add appends to: the index of its item count in
	// args, the count (0: no group yet), and its node, seq and TTL (ms)
	head, count int
	node        string
	seq, px     int64
}

// add appends the Redis keys and the ARGV of addScript of item it, whose
// keys have hash tag tag: to the last group if the item has its node, seq
// and TTL, else to a new group.
func (c *scriptCall) add(tag string, it *Item) {
	for i := range it.Span + 1 {
		c.keys = append(c.keys, counterKey(tag, it.Window, it.ID-int64(i)))
	}
	px := int64((it.TTL + time.Millisecond - 1) / time.Millisecond)
	if c.count == 0 || it.Node != c.node || it.Seq != c.seq || px != c.px {
		c.args = append(c.args, it.Node, it.Seq, px, 0)
		c.head, c.count, c.node, c.seq, c.px = len(c.args)-1, 0, it.Node, it.Seq, px
	}
	c.count++
	c.args[c.head] = c.count // at most MaxScriptItems: boxing it allocates nothing
	c.args = append(c.args, it.Span+1, it.Delta, it.Floor)
}

// addParts sends the items of every part, all on client, as one pipeline
// (see Add) and fills each part's out.
func addParts(ctx context.Context, client RedisClient, parts []addPart) {
	if err := ctx.Err(); err != nil {
		for _, p := range parts {
			for i := range p.out {
				p.out[i].Outcome, p.out[i].Err = NotApplied, err
			}
		}
		return
	}
	var batch []pending
	per := MaxScriptItems
	for pi, p := range parts {
		if p.b.perScript > 0 {
			per = min(per, p.b.perScript)
		}
		for i := range p.items {
			if err := checkItem(&p.items[i]); err != nil {
				p.out[i].Outcome, p.out[i].Err = NotApplied, err
				continue
			}
			it := &p.items[i]
			batch = append(batch, pending{part: pi, idx: i, tag: tagged(p.b.prefix, it.Key), nkeys: it.Span + 1})
		}
	}
	if len(batch) == 0 {
		return
	}
	calls := planCalls(batch, routeOf(client), per)
	for ci := range calls { // the items are the caller's: read them now
		c := &calls[ci]
		for _, i := range c.idx {
			p := &batch[i]
			c.add(p.tag, &parts[p.part].items[p.idx])
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		execBatch(ctx, client, batch, calls)
	}()
	select {
	case <-done:
		for i := range batch {
			p := &batch[i]
			r := &parts[p.part].out[p.idx]
			r.Outcome, r.Total, r.Err = p.res.Outcome, p.res.Total, p.res.Err
			if r.Outcome == NotApplied && parts[p.part].b.resends && neverSent(r.Err) {
				// The last attempt never left, but an earlier one, whose
				// connection broke, may have been applied.
				r.Outcome = MaybeApplied
			}
			r.Totals = append(r.Totals[:0], p.res.Totals...)
		}
	case <-ctx.Done():
		// execBatch still owns batch: mark the items sent (all but the
		// invalid ones) without reading it.
		for _, p := range parts {
			for i := range p.out {
				if p.out[i].Outcome != NotApplied {
					p.out[i].Outcome, p.out[i].Err = MaybeApplied, ctx.Err()
				}
			}
		}
	}
}

// planCalls groups batch into script calls by route, each of at most per
// items and MaxScriptKeys keys (one item alone may name more), keeping the
// order of the items of one group: an item that reads a counter an earlier
// item of the batch writes (the same limiter key) reads it after the write,
// as in a pipeline of one call per item. It sets each call's idx and the
// capacity of its keys and args; addParts fills them.
func planCalls(batch []pending, route keyRoute, per int) []scriptCall {
	groups := make(map[string]int)
	var order [][]int
	for i := range batch {
		g := ""
		switch route {
		case routeSlot:
			g = strconv.Itoa(clusterSlot(batch[i].tag))
		case routeTag:
			g = batch[i].tag
		}
		gi, ok := groups[g]
		if !ok {
			gi = len(order)
			groups[g] = gi
			order = append(order, nil)
		}
		order[gi] = append(order[gi], i)
	}
	var calls []scriptCall
	for _, idx := range order {
		lo, nkeys := 0, 0
		for j, i := range idx {
			if j > lo && (j-lo == per || nkeys+batch[i].nkeys > MaxScriptKeys) {
				calls = append(calls, newCall(idx[lo:j], nkeys))
				lo, nkeys = j, 0
			}
			nkeys += batch[i].nkeys
		}
		calls = append(calls, newCall(idx[lo:], nkeys))
	}
	return calls
}

// newCall returns the call of the items at idx, of nkeys keys in all,
// with room for their keys and the arguments of one group of them.
func newCall(idx []int, nkeys int) scriptCall {
	return scriptCall{idx: idx, keys: make([]string, 0, nkeys), args: make([]any, 0, 4+3*len(idx))}
}

// execBatch sends calls, the script calls of batch, as one pipeline of
// EVALSHA on client and then the calls answered NOSCRIPT as one pipeline
// of EVAL, and fills each item's res.
func execBatch(ctx context.Context, client RedisClient, batch []pending, calls []scriptCall) {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := client.Pipeline()
	for i := range calls {
		calls[i].cmd = addScript.EvalSha(ctx, pipe, calls[i].keys, calls[i].args...)
		cmds[i] = calls[i].cmd
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below
	refreshTopology(client, cmds)
	var again []int
	for i := range calls {
		if isNoScript(calls[i].cmd.Err()) {
			again = append(again, i)
			continue
		}
		decodeCall(&calls[i], batch)
	}
	if len(again) == 0 {
		return
	}
	pipe = client.Pipeline()
	for _, i := range again {
		calls[i].cmd = addScript.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
	}
	_, _ = pipe.Exec(ctx)
	for _, i := range again {
		decodeCall(&calls[i], batch)
	}
}

// decodeCall fills the res of each item of call c from its reply.
func decodeCall(c *scriptCall, batch []pending) {
	v, err := c.cmd.Result()
	if err == nil {
		arr, ok := v.([]any)
		if ok && len(arr) == len(c.idx) {
			for j, i := range c.idx {
				p := &batch[i]
				decodeItem(arr[j], p.nkeys, &p.res)
			}
			return
		}
		err = fmt.Errorf("%w: got %s, want an array of %d replies", ErrBadReply, replyShape(v), len(c.idx))
	} else if errors.Is(err, redis.Nil) {
		err = fmt.Errorf("%w: got nil, want an array", ErrBadReply)
	}
	for _, i := range c.idx {
		r := &batch[i].res
		r.Outcome, r.Err = classify(err), err
	}
}

// decodeItem fills r from v, one item's element of addScript's reply: the
// n totals it read, or the error reply of an item that wrote nothing.
func decodeItem(v any, n int, r *ItemResult) {
	if rerr, ok := v.(redis.Error); ok {
		r.Outcome, r.Err = NotApplied, rerr
		return
	}
	totals, err := decodeTotals(v, n, r.Totals[:0])
	if err != nil {
		r.Outcome, r.Err = MaybeApplied, err
		return
	}
	r.Outcome, r.Totals, r.Total = Applied, totals, totals[len(totals)-1]
}

// replyShape describes a reply that is not the array expected.
func replyShape(v any) string {
	if arr, ok := v.([]any); ok {
		return fmt.Sprintf("an array of %d", len(arr))
	}
	return fmt.Sprintf("%T", v)
}

// Read implements Backend with addScript and a delta of 0, which writes
// nothing. Like Add, it returns when ctx is done whatever the client's
// options.
func (b *RedisBackend) Read(ctx context.Context, key string, id int64, span int, dst []int64) ([]int64, error) {
	it := Item{Key: key, ID: id, TTL: time.Millisecond, Span: span}
	if err := checkItem(&it); err != nil {
		return dst[:0], err
	}
	var c scriptCall
	c.add(tagged(b.prefix, key), &it)
	v, err := call(ctx, func() (any, error) {
		return addScript.Run(ctx, b.client, c.keys, c.args...).Result()
	}, nil)
	if errors.Is(err, redis.Nil) {
		err = fmt.Errorf("%w: got nil, want an array", ErrBadReply)
	}
	if err != nil {
		return dst[:0], err
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != 1 {
		return dst[:0], fmt.Errorf("%w: got %s, want an array of 1 reply", ErrBadReply, replyShape(v))
	}
	if rerr, ok := arr[0].(redis.Error); ok {
		return dst[:0], rerr
	}
	return decodeTotals(arr[0], span+1, dst[:0])
}

// clusterSlot returns the Redis Cluster hash slot of key: CRC-16/XMODEM of
// its hash tag (of the whole key if it has none), mod 16384.
func clusterSlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := range len(key) {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc % 16384)
}
