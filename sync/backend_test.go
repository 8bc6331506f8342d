package sync

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

func newBackend(t testing.TB, c RedisClient) *RedisBackend {
	t.Helper()
	b, err := NewRedisBackend(c, redistest.Prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestKeyLayout: the hash tag holds exactly the limiter key, so all of one
// key's counters share a slot whatever bytes the key has, and escaped keys
// cannot collide with plain ones.
func TestKeyLayout(t *testing.T) {
	b, err := NewRedisBackend(sharedClientless{}, "rl:")
	if err != nil {
		t.Fatal(err)
	}
	if got := b.CounterKey("user:42", 7); got != "rl:{user:42}:sh:7" {
		t.Fatalf("CounterKey = %q", got)
	}
	if got := b.CounterKey("}a{", -3); got != "rl:#{7d617b}:sh:-3" {
		t.Fatalf("CounterKey with braces = %q", got)
	}
	if got := b.RateCounterKey("user:42", 10*time.Second, 7); got != "rl:{user:42}:sh:10000000:7" {
		t.Fatalf("RateCounterKey = %q", got)
	}
	if got := b.RateCounterKey("}a{", time.Millisecond, -3); got != "rl:#{7d617b}:sh:1000:-3" {
		t.Fatalf("RateCounterKey with braces = %q", got)
	}
	if got := b.RateCounterKey("user:42", 0, 7); got != b.CounterKey("user:42", 7) {
		t.Fatalf("RateCounterKey of window 0 = %q", got)
	}
	for _, key := range []string{"a", "user:1", "}x", "{x}", "x}", "a}b{c", "::", "ключ", "\x00\xff", strings.Repeat("k", 600)} {
		s := keySlot(b.CounterKey(key, 0))
		for _, id := range []int64{1, 99, -1, 1 << 40} {
			if got := keySlot(b.CounterKey(key, id)); got != s {
				t.Errorf("key %q: id %d in slot %d, id 0 in slot %d", key, id, got, s)
			}
			if got := keySlot(b.RateCounterKey(key, time.Hour, id)); got != s {
				t.Errorf("key %q: id %d of the hour's rate in slot %d, id 0 in slot %d", key, id, got, s)
			}
		}
		if strings.ContainsAny(key, "{}") {
			continue
		}
		if want := int(crc16(key) % 16384); s != want {
			t.Errorf("key %q in slot %d, want the key's own slot %d", key, s, want)
		}
	}
	for _, p := range []string{"a{", "}", strings.Repeat("p", MaxPrefixBytes+1)} {
		if _, err := NewRedisBackend(sharedClientless{}, p); !errors.Is(err, shardlimit.ErrInvalidConfig) {
			t.Errorf("prefix %q: err %v, want ErrInvalidConfig", p, err)
		}
	}
	if _, err := NewRedisBackend(nil, ""); !errors.Is(err, shardlimit.ErrInvalidConfig) {
		t.Errorf("nil client: err %v", err)
	}
}

// sharedClientless satisfies RedisClient for tests that send nothing.
type sharedClientless struct{ RedisClient }

// TestBackendAdd: totals accumulate over calls and nodes, each item is
// independent, and every counter written has a TTL.
func TestBackendAdd(t *testing.T) {
	c := sharedClient(t)
	b := newBackend(t, c)
	ctx := ctxT(t, 10*time.Second)
	items := []Item{
		{Key: "a", ID: 100, Delta: 3, TTL: time.Minute},
		{Key: "b", ID: 100, Delta: 1, TTL: 1500 * time.Microsecond}, // rounds up to 2ms
		{Key: "a", ID: 101, Delta: 2, TTL: time.Minute},
		{Key: "a", ID: 100, Delta: 4, TTL: 30 * time.Second},
	}
	var out []ItemResult
	out = b.Add(ctx, items, out)
	want := []int64{3, 1, 2, 7}
	for i, r := range out {
		if r.Outcome != Applied || r.Err != nil || r.Total != want[i] || !reflect.DeepEqual(r.Totals, []int64{want[i]}) {
			t.Fatalf("item %d: %+v, want total %d", i, r, want[i])
		}
	}
	// A second node adds to the same counters.
	b2, _ := NewRedisBackend(c, b.prefix)
	out = b2.Add(ctx, items[:1], out)
	if out[0].Total != 10 || len(out) != 1 {
		t.Fatalf("second node: %+v", out)
	}
	for _, k := range []string{b.CounterKey("a", 100), b.CounterKey("a", 101)} {
		ttl, err := c.PTTL(ctx, k).Result()
		if err != nil || ttl <= 0 || ttl > time.Minute {
			t.Errorf("PTTL %s = %v, %v; want in (0, 1m]", k, ttl, err)
		}
	}
	// "b" had a 2 ms TTL: gone soon.
	deadline := time.Now().Add(2 * time.Second)
	for c.Exists(ctx, b.CounterKey("b", 100)).Val() == 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if c.Exists(ctx, b.CounterKey("b", 100)).Val() != 0 {
		t.Error("counter with 2ms TTL still there after 2s")
	}
}

// TestBackendSpan: one call returns the totals of buckets id-span..id,
// oldest first; Read and Delta 0 write nothing.
func TestBackendSpan(t *testing.T) {
	c := sharedClient(t)
	b := newBackend(t, c)
	ctx := ctxT(t, 10*time.Second)
	var items []Item
	for id := int64(10); id <= 13; id++ {
		items = append(items, Item{Key: "s", ID: id, Delta: uint32(id), TTL: time.Minute})
	}
	for _, r := range b.Add(ctx, items, nil) {
		if r.Outcome != Applied {
			t.Fatalf("setup: %+v", r)
		}
	}
	out := b.Add(ctx, []Item{{Key: "s", ID: 14, Delta: 1, TTL: time.Minute, Span: 5}}, nil)
	if want := []int64{0, 10, 11, 12, 13, 1}; out[0].Outcome != Applied || !reflect.DeepEqual(out[0].Totals, want) || out[0].Total != 1 {
		t.Fatalf("span add: %+v, want totals %v", out[0], want)
	}
	got, err := b.Read(ctx, "s", 15, 3, nil)
	if want := []int64{12, 13, 1, 0}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Read = %v, %v; want %v", got, err, want)
	}
	out = b.Add(ctx, []Item{{Key: "s", ID: 16, TTL: time.Minute, Span: 1}}, out)
	if out[0].Outcome != Applied || !reflect.DeepEqual(out[0].Totals, []int64{0, 0}) {
		t.Fatalf("delta 0: %+v", out[0])
	}
	for _, id := range []int64{15, 16, 9} {
		if n := c.Exists(ctx, b.CounterKey("s", id)).Val(); n != 0 {
			t.Errorf("a read created counter %d", id)
		}
	}
	if _, err := b.Read(ctx, "s", 1, MaxSpan+1, nil); !errors.Is(err, ErrInvalidItem) {
		t.Errorf("Read span too large: %v", err)
	}
}

// TestBackendFloor: a counter the store lost is healed up to what this
// node has sent (Floor), and a floor below the total changes nothing.
func TestBackendFloor(t *testing.T) {
	c := sharedClient(t)
	b := newBackend(t, c)
	ctx := ctxT(t, 10*time.Second)
	add := func(it Item) ItemResult {
		t.Helper()
		it.Key, it.ID, it.TTL = "f", 7, time.Minute
		r := b.Add(ctx, []Item{it}, nil)[0]
		if r.Outcome != Applied {
			t.Fatalf("%+v: %+v", it, r)
		}
		return r
	}
	add(Item{Delta: 3, Floor: 3})
	c.Del(ctx, b.CounterKey("f", 7)) // the store loses the counter
	if r := add(Item{Delta: 1, Floor: 4}); r.Total != 4 {
		t.Fatalf("healed total %d, want 4", r.Total)
	}
	if r := add(Item{Delta: 2, Floor: 2}); r.Total != 6 {
		t.Fatalf("total %d, want 6 (floor below total)", r.Total)
	}
	c.Del(ctx, b.CounterKey("f", 7))
	if r := add(Item{Floor: 6}); r.Total != 6 {
		t.Fatalf("heal by delta 0: total %d, want 6", r.Total)
	}
	if ttl := c.PTTL(ctx, b.CounterKey("f", 7)).Val(); ttl <= 0 {
		t.Fatalf("healed counter has PTTL %v", ttl)
	}

	// Two nodes: each heals its own share, so a lost counter comes back
	// as the sum of both, not the larger one.
	add(Item{Node: "a", Delta: 5, Floor: 5})
	if r := add(Item{Node: "b", Delta: 3, Floor: 3}); r.Total != 6+5+3 {
		t.Fatalf("total %d, want 14", r.Total)
	}
	c.Del(ctx, b.CounterKey("f", 7))
	if r := add(Item{Node: "a", Delta: 1, Floor: 6}); r.Total != 6 {
		t.Fatalf("node a healed: total %d, want 6", r.Total)
	}
	if r := add(Item{Node: "b", Floor: 3}); r.Total != 9 {
		t.Fatalf("node b healed: total %d, want 6 + 3", r.Total)
	}
	if r := add(Item{Node: "b", Floor: 3}); r.Total != 9 {
		t.Fatalf("node b healed twice: total %d, want 9", r.Total)
	}
}

// TestBackendGroups: one script call carries items of several nodes, Seqs
// and TTLs, each group's node, Seq and TTL sent once before its items; every
// item is applied with its own, as if sent alone.
func TestBackendGroups(t *testing.T) {
	items := []Item{
		{Key: "g1", ID: 1, Delta: 1, Floor: 1, Node: "a", Seq: 1, TTL: time.Minute},
		{Key: "g2", ID: 1, Delta: 2, Floor: 2, Node: "a", Seq: 1, TTL: time.Minute},
		{Key: "g1", ID: 1, Delta: 3, Floor: 3, Node: "b", Seq: 1, TTL: time.Minute},
		{Key: "g3", ID: 1, Delta: 4, Floor: 4, Node: "b", Seq: 2, TTL: time.Minute},
		{Key: "g4", ID: 1, Delta: 5, Floor: 5, Node: "b", Seq: 2, TTL: 2 * time.Minute},
		{Key: "g1", ID: 1, Delta: 1, Floor: 1, Node: "a", Seq: 1, TTL: time.Minute}, // a re-send
	}
	var call scriptCall
	for i := range items {
		call.add("p:{"+items[i].Key+"}", &items[i])
	}
	want := []any{
		"a", int64(1), int64(60000), 2, 1, uint32(1), int64(1), 1, uint32(2), int64(2),
		"b", int64(1), int64(60000), 1, 1, uint32(3), int64(3),
		"b", int64(2), int64(60000), 1, 1, uint32(4), int64(4),
		"b", int64(2), int64(120000), 1, 1, uint32(5), int64(5),
		"a", int64(1), int64(60000), 1, 1, uint32(1), int64(1),
	}
	if !reflect.DeepEqual(call.args, want) {
		t.Fatalf("ARGV %v, want %v", call.args, want)
	}

	c := sharedClient(t)
	b := newBackend(t, c)
	ctx := ctxT(t, 10*time.Second)
	out := b.Add(ctx, items, nil)
	for i, total := range []int64{1, 2, 4, 4, 5, 4} {
		if r := out[i]; r.Outcome != Applied || r.Total != total {
			t.Errorf("item %d (%+v): %+v, want total %d", i, items[i], r, total)
		}
	}
	shares := c.HGetAll(ctx, b.CounterKey("g1", 1)).Val()
	if shares["n:a"] != "1" || shares["n:b"] != "3" || shares["q:a"] != "1" || shares["q:b"] != "1" || shares["t"] != "4" {
		t.Errorf("counter g1: %v, want a's 1 and b's 3 of Seq 1, total 4", shares)
	}
	for key, ttl := range map[string]time.Duration{"g3": time.Minute, "g4": 2 * time.Minute} {
		if d := c.PTTL(ctx, b.CounterKey(key, 1)).Val(); d <= ttl-10*time.Second || d > ttl {
			t.Errorf("counter %s: TTL %v, want about %v", key, d, ttl)
		}
	}
}

// TestAddScriptArgs: an argument the script would store or pass on as it
// came (floor, Seq, TTL) must be written as the script writes numbers: any
// other spelling fails its item alone, with nothing written; a layout that
// does not add up fails the whole call.
func TestAddScriptArgs(t *testing.T) {
	c := sharedClient(t)
	ctx := ctxT(t, 10*time.Second)
	p := redistest.Prefix(t)
	keys := []string{p + "{a}:sh:1", p + "{b}:sh:1", p + "{c}:sh:1", p + "{d}:sh:1"}
	argv := []any{"n", "1", "60000", "2", "1", "1", "1e3", "1", "1", "1", // floor 1e3; a good item
		"n", "01", "60000", "1", "1", "1", "1", // Seq 01
		"n", "1", " 6e4", "1", "1", "1", "1"} // TTL " 6e4"
	v, err := addScript.Run(ctx, c, keys, argv...).Result()
	arr, ok := v.([]any)
	if err != nil || !ok || len(arr) != 4 {
		t.Fatalf("reply %v, %v; want 4 items", v, err)
	}
	for i, e := range arr {
		_, isErr := e.(redis.Error)
		if isErr != (i != 1) {
			t.Errorf("item %d: %v", i, e)
		}
		if n := c.Exists(ctx, keys[i]).Val(); (n == 1) != (i == 1) {
			t.Errorf("item %d: key %s exists %d", i, keys[i], n)
		}
	}
	if _, err := addScript.Run(ctx, c, keys[:1], "n", "1", "60000", "2", "1", "1", "1").Result(); err == nil {
		t.Error("a group of 2 items with one: no error")
	}
}

// TestBackendSeq: an item sent again with the same Seq (a client's re-send)
// adds its Delta once, and so does a late copy of an older write; the Floor
// applies either way; Seq 0 adds every time; each node's Seq is its own.
func TestBackendSeq(t *testing.T) {
	c := sharedClient(t)
	b := newBackend(t, c)
	ctx := ctxT(t, 10*time.Second)
	add := func(it Item) int64 {
		t.Helper()
		it.Key, it.ID, it.TTL = "s", 3, time.Minute
		r := b.Add(ctx, []Item{it}, nil)[0]
		if r.Outcome != Applied {
			t.Fatalf("%+v: %+v", it, r)
		}
		return r.Total
	}
	steps := []struct {
		it   Item
		want int64
		why  string
	}{
		{Item{Node: "a", Delta: 2, Floor: 2, Seq: 1}, 2, "first write"},
		{Item{Node: "a", Delta: 2, Floor: 2, Seq: 1}, 2, "the same write again"},
		{Item{Node: "b", Delta: 3, Floor: 3, Seq: 1}, 5, "another node's Seq 1"},
		{Item{Node: "a", Delta: 1, Floor: 3, Seq: 2}, 6, "a's next write"},
		{Item{Node: "a", Delta: 2, Floor: 2, Seq: 1}, 6, "a late copy of a's first write"},
		{Item{Node: "a", Delta: 4, Floor: 7, Seq: 2}, 10, "Seq 2 again: no delta, but its floor raises a to 7"},
		{Item{Node: "b", Delta: 1, Floor: 4}, 11, "Seq 0 adds every time"},
		{Item{Node: "b", Delta: 1, Floor: 5}, 12, "Seq 0 adds every time"},
	}
	for _, st := range steps {
		if got := add(st.it); got != st.want {
			t.Fatalf("%s (%+v): total %d, want %d", st.why, st.it, got, st.want)
		}
	}
	out := b.Add(ctx, []Item{{Key: "s", ID: 3, TTL: time.Minute, Seq: -1}, {Key: "s", ID: 3, TTL: time.Minute, Seq: 1 << 53}}, nil)
	for i, r := range out {
		if r.Outcome != NotApplied || !errors.Is(r.Err, ErrInvalidItem) {
			t.Errorf("invalid Seq %d: %+v", i, r)
		}
	}
	c.HSet(ctx, b.CounterKey("s", 3), "q:a", "x")
	if r := b.Add(ctx, []Item{{Key: "s", ID: 3, Node: "a", Delta: 1, TTL: time.Minute, Seq: 9}}, nil)[0]; r.Outcome != NotApplied {
		t.Errorf("a corrupt q:a: %+v, want an error reply", r)
	}
}

// TestBackendInvalidItems: invalid items are refused before sending and do
// not disturb valid ones in the same batch.
func TestBackendInvalidItems(t *testing.T) {
	c := sharedClient(t)
	b := newBackend(t, c)
	ctx := ctxT(t, 10*time.Second)
	items := []Item{
		{Key: "", ID: 1, Delta: 1, TTL: time.Minute},
		{Key: "k", ID: 1, Delta: 1, TTL: 0},
		{Key: "k", ID: 1, Delta: 1, TTL: time.Minute, Span: -1},
		{Key: "k", ID: 1, Delta: 1, TTL: time.Minute, Floor: -1},
		{Key: strings.Repeat("x", shardlimit.MaxKeyBytesLimit+1), ID: 1, Delta: 1, TTL: time.Minute},
		{Key: "k", ID: 1, Delta: 1, TTL: time.Minute, Window: -time.Second},
		{Key: "k", ID: 1, Delta: 1, TTL: time.Minute, Window: time.Second + time.Nanosecond},
		{Key: "k", ID: 1, Delta: 1, TTL: time.Minute, Node: strings.Repeat("n", MaxNodeBytes+1)},
		{Key: "k", ID: 1, Delta: 1, TTL: time.Minute},
	}
	out := b.Add(ctx, items, nil)
	wantErr := []error{shardlimit.ErrInvalidKey, ErrInvalidItem, ErrInvalidItem, ErrInvalidItem, shardlimit.ErrInvalidKey, ErrInvalidItem, ErrInvalidItem, ErrInvalidItem}
	for i, w := range wantErr {
		if out[i].Outcome != NotApplied || !errors.Is(out[i].Err, w) {
			t.Errorf("item %d: %+v, want NotApplied %v", i, out[i], w)
		}
	}
	if r := out[len(items)-1]; r.Outcome != Applied || r.Total != 1 {
		t.Errorf("valid item: %+v", r)
	}
}

// TestBackendCorruptCounter: a counter holding foreign data is an error
// reply for that item only, with nothing written.
func TestBackendCorruptCounter(t *testing.T) {
	c := sharedClient(t)
	b := newBackend(t, c)
	ctx := ctxT(t, 10*time.Second)
	hset := func(key string, id int64, field, v string) {
		c.HSet(ctx, b.CounterKey(key, id), field, v)
		c.Expire(ctx, b.CounterKey(key, id), time.Minute)
	}
	hset("x", 1, "t", "abc")
	hset("neg", 1, "n:", "-5")
	c.Set(ctx, b.CounterKey("h", 1), "1", time.Minute) // a string counter: WRONGTYPE
	hset("old", 4, "t", "1e3")
	hset("big", 1, "t", "99999999999999999999")
	hset("exp", 1, "t", "5e2") // as many characters as 500 has digits
	hset("zero", 1, "q:", "012")
	hset("blank", 1, "n:", " 12")
	items := []Item{
		{Key: "x", ID: 1, Delta: 1, TTL: time.Minute},
		{Key: "neg", ID: 1, Delta: 1, TTL: time.Minute},
		{Key: "h", ID: 1, Delta: 1, TTL: time.Minute},
		{Key: "old", ID: 5, Delta: 1, TTL: time.Minute, Span: 2}, // older bucket corrupt
		{Key: "big", ID: 1, Delta: 1, TTL: time.Minute},
		{Key: "exp", ID: 1, Delta: 1, TTL: time.Minute},
		{Key: "zero", ID: 1, Delta: 1, TTL: time.Minute},
		{Key: "blank", ID: 1, Delta: 1, TTL: time.Minute},
		{Key: "ok", ID: 1, Delta: 1, TTL: time.Minute},
	}
	out := b.Add(ctx, items, nil)
	for i, r := range out[:len(items)-1] {
		var rerr redis.Error
		if r.Outcome != NotApplied || !errors.As(r.Err, &rerr) {
			t.Errorf("item %d: %+v, want NotApplied with a Redis error reply", i, r)
		}
	}
	if r := out[len(items)-1]; r.Outcome != Applied || r.Total != 1 {
		t.Errorf("valid item: %+v", r)
	}
	if v := c.HGet(ctx, b.CounterKey("x", 1), "t").Val(); v != "abc" {
		t.Errorf("corrupt counter changed to %q", v)
	}
	if n := c.Exists(ctx, b.CounterKey("old", 5)).Val(); n != 0 {
		t.Error("increment applied although an older bucket was corrupt")
	}
}

// garbage maps a limiter key to the element of a script's reply a fake
// server gives its item; the keys starting with "top" give that reply to
// the whole call instead.
var garbage = map[string]string{
	"status":      "+OK\r\n",
	"array":       "*1\r\n:5\r\n", // an item of one key answers a bare integer
	"nil":         "$-1\r\n",
	"bulk":        "$3\r\nabc\r\n",
	"nilarr":      "*-1\r\n",
	"empty":       "*0\r\n",
	"long":        "*2\r\n:1\r\n:2\r\n",
	"negative":    ":-5\r\n",
	"nested":      "*1\r\n*1\r\n:1\r\n",
	"double":      ",1.5\r\n",
	"error":       "-ERR boom\r\n",
	"good":        ":7\r\n",
	"goodspan":    "*3\r\n:1\r\n:2\r\n:3\r\n",
	"shortspan":   "*2\r\n:1\r\n:2\r\n",
	"intspan":     ":3\r\n",
	"strspan":     "*3\r\n:1\r\n$1\r\n2\r\n:3\r\n",
	"negspan":     "*3\r\n:1\r\n:-2\r\n:3\r\n",
	"nilspan":     "*3\r\n:1\r\n$-1\r\n:3\r\n",
	"errspan":     "*3\r\n:1\r\n-ERR x\r\n:3\r\n",
	"topstatus":   "+OK\r\n",
	"topnil":      "$-1\r\n",
	"topempty":    "*0\r\n",
	"toplong":     "*3\r\n*1\r\n:1\r\n*1\r\n:1\r\n*1\r\n:1\r\n",
	"toperror":    "-ERR boom\r\n",
	"topflatgood": "*1\r\n:7\r\n",
}

// limiterKeyOf returns the limiter key of a counter key (the text inside
// its hash tag).
func limiterKeyOf(k string) string {
	i, j := strings.IndexByte(k, '{'), strings.IndexByte(k, '}')
	if i < 0 || j < i {
		return ""
	}
	return k[i+1 : j]
}

// garbageReply returns the fake server's reply to an EVAL or EVALSHA call
// of addScript (args): each item's element of garbage in turn, or the
// whole reply of the first item's if its key starts with "top".
func garbageReply(args []string) []byte {
	n, err := strconv.Atoi(args[2])
	if err != nil || len(args) < 3+n {
		return []byte("-ERR bad call\r\n")
	}
	keys, argv := args[3:3+n], args[3+n:]
	var items []string
	nkeys := scriptItems(argv)
	for k, i := 0, 0; i < len(nkeys) && k < len(keys); i++ {
		items = append(items, limiterKeyOf(keys[k]))
		k += max(nkeys[i], 1)
	}
	if len(items) > 0 && strings.HasPrefix(items[0], "top") {
		return []byte(garbage[items[0]])
	}
	out := fmt.Sprintf("*%d\r\n", len(items))
	for _, k := range items {
		out += garbage[k]
	}
	return []byte(out)
}

// TestBackendGarbageReplies: every malformed reply is an error for its item
// only (MaybeApplied: the script may have run), or for the items of its call
// if the call's whole reply is malformed, never a panic. An item's error
// reply is NotApplied for it (the script wrote nothing of it).
func TestBackendGarbageReplies(t *testing.T) {
	f := redistest.StartFake(t, func(args []string) []byte {
		switch strings.ToUpper(args[0]) {
		case "EVALSHA", "EVAL":
			return garbageReply(args)
		}
		return nil
	})
	b := newBackend(t, newClient(t, f.Addr))
	ctx := ctxT(t, 10*time.Second)
	var items []Item
	var keys []string
	for k := range garbage {
		if strings.HasPrefix(k, "top") {
			continue
		}
		span := 0
		if strings.HasSuffix(k, "span") {
			span = 2
		}
		keys = append(keys, k)
		items = append(items, Item{Key: k, ID: 1, Delta: 1, TTL: time.Minute, Span: span})
	}
	out := b.Add(ctx, items, nil) // one call: a single server takes any keys
	for i, k := range keys {
		r := out[i]
		switch k {
		case "good":
			if r.Outcome != Applied || r.Total != 7 {
				t.Errorf("%s: %+v", k, r)
			}
		case "goodspan":
			if r.Outcome != Applied || r.Total != 3 || !reflect.DeepEqual(r.Totals, []int64{1, 2, 3}) {
				t.Errorf("%s: %+v", k, r)
			}
		case "error":
			if r.Outcome != NotApplied || r.Err == nil {
				t.Errorf("%s: %+v, want NotApplied", k, r)
			}
		default:
			if r.Outcome != MaybeApplied || !errors.Is(r.Err, ErrBadReply) {
				t.Errorf("%s: %+v, want MaybeApplied ErrBadReply", k, r)
			}
		}
	}
	for k := range garbage {
		if !strings.HasPrefix(k, "top") {
			continue
		}
		r := b.Add(ctx, []Item{{Key: k, ID: 1, Delta: 1, TTL: time.Minute}, {Key: "good", ID: 1, Delta: 1, TTL: time.Minute}}, nil)
		want, werr := MaybeApplied, ErrBadReply
		if k == "toperror" {
			want, werr = NotApplied, nil
		}
		for i := range r {
			if r[i].Outcome != want || r[i].Err == nil || werr != nil && !errors.Is(r[i].Err, werr) {
				t.Errorf("%s, item %d: %+v, want %v %v", k, i, r[i], want, werr)
			}
		}
	}
	for _, k := range []string{"bulk", "topstatus", "toplong"} {
		if _, err := b.Read(ctx, k, 1, 0, nil); !errors.Is(err, ErrBadReply) {
			t.Errorf("Read of garbage %s: %v", k, err)
		}
	}
	if _, err := b.Read(ctx, "error", 1, 0, nil); err == nil || errors.Is(err, ErrBadReply) {
		t.Errorf("Read of an error reply: %v", err)
	}
	if _, err := b.Time(ctx); err == nil {
		t.Error("Time from a server answering +OK: no error")
	}
}

// TestBackendNoScript: after the store's script cache is flushed, items are
// retried with EVAL inside the same Add, and the next Add uses EVALSHA
// again. MONITOR shows the exact sequence.
func TestBackendNoScript(t *testing.T) {
	s := redistest.StartServer(t)
	c := newClient(t, s.Addr)
	b := newBackend(t, c)
	ctx := ctxT(t, 10*time.Second)
	items := []Item{{Key: "a", ID: 1, Delta: 1, TTL: time.Minute}, {Key: "b", ID: 1, Delta: 1, TTL: time.Minute}}
	check := func(want int64) {
		t.Helper()
		for _, r := range b.Add(ctx, items, nil) {
			if r.Outcome != Applied || r.Total != want {
				t.Fatalf("%+v, want total %d", r, want)
			}
		}
	}
	m := redistest.StartMonitor(t, s.Addr)
	check(1) // a fresh server: NOSCRIPT, then EVAL
	check(2) // cached: EVALSHA only
	if _, err := redistest.Do(s.Addr, "SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	check(3)
	var seq []string
	for _, cmd := range m.Sync(t) {
		switch name := strings.ToUpper(cmd[0]); name {
		case "EVALSHA", "EVAL":
			seq = append(seq, name)
		}
	}
	// Both items in one call (a single server takes any keys).
	want := []string{"EVALSHA", "EVAL", "EVALSHA", "EVALSHA", "EVAL"}
	if !reflect.DeepEqual(seq, want) {
		t.Fatalf("script commands %v, want %v", seq, want)
	}
}

// TestBackendUnreachable: failures that provably sent nothing are
// NotApplied, a reply lost to a timeout is MaybeApplied, and Add returns
// within its context's deadline.
func TestBackendUnreachable(t *testing.T) {
	items := []Item{{Key: "a", ID: 1, Delta: 1, TTL: time.Minute}, {Key: "b", ID: 1, Delta: 1, TTL: time.Minute}}
	// The lax client's ReadTimeout: an Add that waited for the store
	// instead of its context (at most 2 s here) would take this long. A
	// tighter bound would judge the machine's load.
	const laxTimeout = 5 * time.Second
	expect := func(name string, b *RedisBackend, ctx context.Context, want Outcome) {
		t.Helper()
		start := time.Now()
		out := b.Add(ctx, items, nil)
		if el := time.Since(start); el >= laxTimeout {
			t.Errorf("%s: Add took %v: it did not return at its context's deadline", name, el)
		}
		for _, r := range out {
			if r.Outcome != want || r.Err == nil {
				t.Errorf("%s: %+v (%v), want %v", name, r, r.Err, want)
			}
		}
	}
	// go-redis retries a refused dial 5 times, 100ms apart, before it
	// reports the dial error: give it the time.
	refused := newBackend(t, newClient(t, "127.0.0.1:1"))
	expect("refused", refused, ctxT(t, 2*time.Second), NotApplied)

	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expect("canceled", newBackend(t, sharedClient(t)), canceled, NotApplied)

	closed := redis.NewClient(&redis.Options{Addr: redistest.RequireRedis(t), MaxRetries: -1})
	_ = closed.Close()
	expect("closed client", newBackend(t, closed), ctxT(t, time.Second), NotApplied)

	p := redistest.StartProxy(t, redistest.RequireRedis(t))
	hole := newBackend(t, newClient(t, p.Addr))
	if out := hole.Add(ctxT(t, 10*time.Second), items, nil); out[0].Outcome != Applied { // a first dial on a loaded machine
		t.Fatalf("through the proxy: %+v", out[0])
	}
	p.SetMode(redistest.Blackhole)
	expect("blackhole", hole, ctxT(t, 100*time.Millisecond), MaybeApplied)

	// A client that ignores context deadlines on its sockets: Add still
	// returns at the deadline.
	lax := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1, ReadTimeout: laxTimeout})
	t.Cleanup(func() { _ = lax.Close() })
	expect("blackhole, ContextTimeoutEnabled false", newBackend(t, lax), ctxT(t, 100*time.Millisecond), MaybeApplied)
	if _, err := newBackend(t, lax).Read(ctxT(t, 100*time.Millisecond), "a", 1, 0, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Read through blackhole: %v", err)
	}
	if _, err := newBackend(t, lax).Time(ctxT(t, 100*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Time through blackhole: %v", err)
	}
}

// TestBackendTime: Redis TIME is close to the local clock.
func TestBackendTime(t *testing.T) {
	b := newBackend(t, sharedClient(t))
	rt, err := b.Time(ctxT(t, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(rt); d > time.Second || d < -time.Second {
		t.Fatalf("Redis TIME %v is %v from local time", rt, d)
	}
}

// TestBackendConcurrentAdd: many goroutines adding to one counter lose no
// unit.
func TestBackendConcurrentAdd(t *testing.T) {
	b := newBackend(t, sharedClient(t))
	ctx := ctxT(t, 10*time.Second)
	var failed atomic.Int64
	done := make(chan struct{})
	for g := range 16 {
		go func() {
			defer func() { done <- struct{}{} }()
			items := make([]Item, 10)
			for i := range items {
				items[i] = Item{Key: fmt.Sprintf("k%d", i), ID: 1, Delta: uint32(g%3 + 1), TTL: time.Minute}
			}
			for _, r := range b.Add(ctx, items, nil) {
				if r.Outcome != Applied {
					failed.Add(1)
				}
			}
		}()
	}
	for range 16 {
		<-done
	}
	if failed.Load() != 0 {
		t.Fatalf("%d items failed", failed.Load())
	}
	want := int64(0)
	for g := range 16 {
		want += int64(g%3 + 1)
	}
	got, err := b.Read(ctx, "k3", 1, 0, nil)
	if err != nil || got[0] != want {
		t.Fatalf("total %v, %v; want %d", got, err, want)
	}
}

// scriptItems returns the key count (1 + Span) of each item of argv, the
// ARGV of an addScript call (groups of node, seq, TTL, m and m items of
// count, delta, floor).
func scriptItems(argv []string) []int {
	var nkeys []int
	for len(argv) >= 4 {
		m, err := strconv.Atoi(argv[3])
		if err != nil || len(argv) < 4+3*m {
			return nkeys
		}
		for i := range m {
			n, _ := strconv.Atoi(argv[4+3*i])
			nkeys = append(nkeys, n)
		}
		argv = argv[4+3*m:]
	}
	return nkeys
}
