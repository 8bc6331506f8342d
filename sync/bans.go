package sync

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// BanClient is the part of redis.UniversalClient a BanStore uses: the
// Lua scripts, EVALSHA then EVAL when the store does not hold one.
// *redis.Client, *redis.ClusterClient, *redis.Ring and every
// redis.UniversalClient satisfy it.
type BanClient interface {
	redis.Scripter
}

// BanStore keeps the bans of the httplimit middlewares of a cluster in
// Redis (httplimit.Options.BanStore): one sorted set, <prefix>{bans},
// whose members are a rule's key namespace (httplimit.KeyNamespace)
// followed by a client key, scored by the ban's end in Unix milliseconds
// (rounded up). Bans that ended are removed by every read; the set
// expires a minute after its last ban ends (by the writer's clock),
// so nothing is kept much longer than a ban.
// All of it is one key, so one Redis Cluster slot.
//
// A ban written by one node is enforced by every node within its
// BanSyncInterval plus two round trips; a node that restarts reads the
// bans in force when it starts. Bans are judged by each node's clock
// (the middleware's, wall time at its start plus monotonic time since):
// nodes whose clocks differ by e end a ban up to e apart.
//
// BanStore is safe for concurrent use and needs no Close: the client stays
// the caller's.
type BanStore struct {
	client BanClient
	key    string
}

var _ httplimit.BanStore = (*BanStore)(nil)

// NewBanStore returns a BanStore keeping bans under prefix ("" means
// DefaultPrefix) through client. It does no I/O. It returns an error
// wrapping shardlimit.ErrInvalidConfig if client is nil or prefix contains
// a brace or is longer than MaxPrefixBytes.
func NewBanStore(client BanClient, prefix string) (*BanStore, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil redis client", shardlimit.ErrInvalidConfig)
	}
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := checkPrefix(prefix); err != nil {
		return nil, err
	}
	return &BanStore{client: client, key: prefix + "{bans}"}, nil
}

// Key returns the Redis key of the sorted set of bans.
func (s *BanStore) Key() string { return s.key }

// putBan keeps the later of two bans of one member, and makes the set
// expire ARGV[4] ms after its last ban ends, judged by the writer's clock
// ARGV[3] (ms), not Redis's: ban ends are on the nodes' clocks.
var putBan = redis.NewScript(`
local cur = redis.call('ZSCORE', KEYS[1], ARGV[2])
if (not cur) or tonumber(cur) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
end
local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if top[2] then
  redis.call('PEXPIRE', KEYS[1], math.max(1, tonumber(top[2]) - tonumber(ARGV[3]) + tonumber(ARGV[4])))
end
return 1
`)

// banSlack is how long the set of bans outlives its last ban, for the
// nodes' clocks to differ from the writer's.
const banSlack = time.Minute

// liftBan removes a member.
var liftBan = redis.NewScript(`return redis.call('ZREM', KEYS[1], ARGV[1])`)

// activeBans removes the bans that ended by ARGV[1] and returns up to
// ARGV[2] of the others, member and score.
var activeBans = redis.NewScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
return redis.call('ZRANGE', KEYS[1], '(' .. ARGV[1], '+inf', 'BYSCORE', 'WITHSCORES', 'LIMIT', 0, ARGV[2])
`)

// ceilMs returns t in Unix milliseconds, rounded up.
func ceilMs(t time.Time) int64 {
	ns := t.UnixNano()
	ms := ns / 1e6
	if ns%1e6 > 0 {
		ms++
	}
	return ms
}

// PutBan implements httplimit.BanStore: it records b, keeping a ban of
// the same member that ends later, and makes the set of bans expire a
// minute after the last ends (its Until less now, the writer's instant).
func (s *BanStore) PutBan(ctx context.Context, b httplimit.StoredBan, now time.Time) error {
	if len(b.Namespace) != httplimit.KeyNamespaceLen || b.Key == "" {
		return fmt.Errorf("%w: ban of namespace %q, key %q", shardlimit.ErrInvalidConfig, b.Namespace, b.Key)
	}
	return putBan.Run(ctx, s.client, []string{s.key}, ceilMs(b.Until), b.Namespace+b.Key,
		now.UnixMilli(), banSlack.Milliseconds()).Err()
}

// LiftBan implements httplimit.BanStore: it removes the ban of key on the
// rule of namespace ns.
func (s *BanStore) LiftBan(ctx context.Context, ns, key string) error {
	return liftBan.Run(ctx, s.client, []string{s.key}, ns+key).Err()
}

// ActiveBans implements httplimit.BanStore: the bans ending after now, at
// most limit (which must be positive), and whether that was all of them.
// It removes the bans that ended. Errors wrap ErrBadReply for a reply it
// cannot decode.
func (s *BanStore) ActiveBans(ctx context.Context, now time.Time, limit int) ([]httplimit.StoredBan, bool, error) {
	if limit <= 0 {
		return nil, false, fmt.Errorf("%w: limit %d", shardlimit.ErrInvalidConfig, limit)
	}
	v, err := activeBans.Run(ctx, s.client, []string{s.key}, now.UnixMilli(), limit+1).Result()
	if err != nil {
		return nil, false, err
	}
	items, ok := v.([]any)
	if !ok || len(items)%2 != 0 {
		return nil, false, fmt.Errorf("%w: bans: %T of %d items", ErrBadReply, v, len(items))
	}
	out := make([]httplimit.StoredBan, 0, min(limit, len(items)/2))
	for i := 0; i+1 < len(items) && len(out) < limit; i += 2 {
		m, ok1 := items[i].(string)
		sc, ok2 := items[i+1].(string)
		if !ok1 || !ok2 {
			return nil, false, fmt.Errorf("%w: bans: member %T, score %T", ErrBadReply, items[i], items[i+1])
		}
		ms, err := strconv.ParseFloat(sc, 64)
		if err != nil || len(m) <= httplimit.KeyNamespaceLen {
			return nil, false, fmt.Errorf("%w: bans: member %q, score %q", ErrBadReply, m, sc)
		}
		out = append(out, httplimit.StoredBan{
			Namespace: m[:httplimit.KeyNamespaceLen], Key: m[httplimit.KeyNamespaceLen:],
			Until: time.UnixMilli(int64(ms)),
		})
	}
	return out, len(items)/2 <= limit, nil
}
