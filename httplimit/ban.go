package httplimit

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/shardlimit/shardlimit"
)

// Bounds of Ban, Concurrency and Options.MaxPolicyKeys.
const (
	// MaxBanAfter is the largest Ban.After accepted.
	MaxBanAfter = 1 << 20
	// MaxBanDuration is the longest Ban.Within, Ban.For and Ban.Max
	// accepted: one year.
	MaxBanDuration = 8760 * time.Hour
	// MaxBanGrowth is the largest Ban.Growth accepted.
	MaxBanGrowth = 1000.0
	// DefaultBanMax is Ban.Max when Growth is above 1 and Max is 0: 24
	// hours, or For if that is longer.
	DefaultBanMax = 24 * time.Hour
	// MaxConcurrency is the largest Concurrency.Limit accepted.
	MaxConcurrency = 1 << 20
	// DefaultConcurrencyRetryAfter is Concurrency.RetryAfter when it is 0.
	DefaultConcurrencyRetryAfter = time.Second
	// DefaultMaxPolicyKeys is Options.MaxPolicyKeys when it is 0: the ban
	// table and the in-flight table each hold at most 65,536 (rule, client)
	// pairs: when full, about 10 MiB for bans and 8 MiB for requests in
	// flight (slots of 56 and 24 bytes, each with room for the longest
	// key, 83 bytes under the default KeyConfig.MaxKeyBytes, and an index
	// entry). The tables grow to it as keys arrive.
	DefaultMaxPolicyKeys = 1 << 16
	// MaxPolicyKeysLimit is the largest Options.MaxPolicyKeys accepted.
	MaxPolicyKeysLimit = 1 << 24
)

// Ban bans a client of a rule after repeated violations: once the rule's
// limiter has denied the client After times within Within (counted from
// the first of those denials: the window starts at a denial and ends
// Within later, and the next denial after it starts a new one), every
// request of the client that the rule matches is denied for For, without
// consuming anything, with status 429 Too Many Requests and Retry-After
// in whole seconds, rounded up (RFC 9110, section 10.2.3): the later of
// the ban's end and the instant the rule's limiter would admit the
// request (asked by a Peek, which consumes nothing), so that a client
// that waits Retry-After is admitted unless another denial arises. The
// promise costs a Peek per banned request: nothing measurable with the
// limiters the middleware builds (BenchmarkBanned: about a denial's
// cost, no allocation), but a store round trip with one that asks a
// store on every decision (sync.Exact through Options.NewLimiter), and
// one allocation (the key's copy) with any Options.NewLimiter limiter.
// 429 rather than 403: the client is refused for its rate, and may come
// back when Retry-After says; 403 is for clients a rule set refuses for
// who they are.
//
// Repeat offences grow the ban: the n-th ban of a client is For x
// Growth^(n-1), at most Max. The count of offences is forgotten when the
// client goes Max (For if Growth is 1) after its last ban ended without a
// new one, or when the table of bans needs the room (see
// Options.MaxPolicyKeys).
//
// Requests denied during a ban do not count as violations and do not
// lengthen it; denials let through by Options.DryRun never ban, and under
// DryRun a banned client (by SetBan or the BanStore) is let through, as is
// a request over a Concurrency limit. Bans are
// per rule and per client key (the key the rule's limiter counts,
// KeyConfig): a banned client is still served on the other rules' routes.
// A ban outlives reloads that keep the rule's name, and is not enforced
// while no rule of that name is in force. The middleware's Bans, SetBan
// and LiftBan list,
// set and lift bans; with Options.BanStore, they are shared by every node.
// The store shares bans, not denials or offences: each node counts the
// denials it made and the bans it started, so a client whose requests are
// spread over N nodes may be denied up to N x (After-1) + 1 times within
// Within before its first ban (then enforced by every node), and a repeat
// offence grows the ban only on a node that started the previous one.
//
// In JSON: {"after": 5, "within": "1m", "for": "15m", "growth": 2,
// "max": "24h"}, durations as Go duration strings.
type Ban struct {
	// After is the number of denials that bans, in [1, MaxBanAfter].
	After int
	// Within is the period the denials must fall in, in
	// (0, MaxBanDuration].
	Within time.Duration
	// For is the first ban's length, in (0, MaxBanDuration].
	For time.Duration
	// Growth multiplies the length of each repeat ban, in [1,
	// MaxBanGrowth]; 0 means 1 (every ban lasts For).
	Growth float64
	// Max caps a grown ban, in [For, MaxBanDuration]; 0 means
	// DefaultBanMax (or For if longer) when Growth is above 1, and For
	// otherwise.
	Max time.Duration
}

// Length returns the length of the n-th ban (n >= 1) of a client under b
// (validated): For x Growth^(n-1), at most Max.
func (b *Ban) Length(n int) time.Duration {
	g, hi := b.Growth, b.MaxLength()
	if g <= 1 || n <= 1 {
		return min(b.For, hi)
	}
	d := float64(b.For) * math.Pow(g, float64(n-1))
	if d >= float64(hi) || math.IsNaN(d) {
		return hi
	}
	return time.Duration(d)
}

// MaxLength returns the longest ban b gives: Max, or its default.
func (b *Ban) MaxLength() time.Duration {
	switch {
	case b.Max > 0:
		return b.Max
	case b.Growth > 1:
		return max(DefaultBanMax, b.For)
	}
	return b.For
}

// validate checks b.
func (b *Ban) validate() error {
	if b.After < 1 || b.After > MaxBanAfter {
		return fmt.Errorf("ban: after %d outside [1, %d]", b.After, MaxBanAfter)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"within", b.Within}, {"for", b.For}} {
		if d.v <= 0 || d.v > MaxBanDuration {
			return fmt.Errorf("ban: %s %v outside (0, %v]", d.name, d.v, MaxBanDuration)
		}
	}
	if b.Growth != 0 && !(b.Growth >= 1 && b.Growth <= MaxBanGrowth) {
		return fmt.Errorf("ban: growth %v outside [1, %v]", b.Growth, MaxBanGrowth)
	}
	if b.Max != 0 && (b.Max < b.For || b.Max > MaxBanDuration) {
		return fmt.Errorf("ban: max %v outside [for %v, %v]", b.Max, b.For, MaxBanDuration)
	}
	return nil
}

// Concurrency caps the requests a client of a rule has in flight: a slot
// is taken before the rule's limiter is asked and the next handler called,
// and given back when that handler returns, normally, by a panic (which
// then goes on: net/http's http.ErrAbortHandler included) or after its
// client went away. A request that finds Limit slots taken is answered
// Status with Retry-After RetryAfter and a one-line text/plain body (never
// handed to the middleware's Denied hook, whose answer is a 429), without
// the X-RateLimit fields (the rate was not asked), and consumes nothing of
// the rule's rate; a request the rate denies gives its slot back at once.
// What runs after the handler returned is not counted: with fasthttp, a
// body written by a stream writer (RequestCtx.SetBodyStreamWriter) or a
// hijacked connection (RequestCtx.Hijack); with either, a connection the
// handler handed to another goroutine. A cap on long streams must hold
// the handler until the stream ends.
//
// The count is in-process, per middleware: with N servers a client may
// have up to N x Limit requests in flight in all. A count shared through
// a store would have to be released by the node that took it, and a node
// that dies holding slots would leak them until an expiry that is either
// shorter than the slowest request (and then admits more than Limit) or
// longer (and then refuses a client that has nothing in flight); neither
// keeps the bound, so none is offered.
//
// The slots live in a capped table (Options.MaxPolicyKeys pairs of rule
// and client); a client that needs a new entry in a full table is refused
// as if at its limit, so the cap never admits more than it promises.
//
// In JSON: {"limit": 10, "status": 503, "retry_after": "1s"}.
type Concurrency struct {
	// Limit is the most requests a client has in flight on the rule, in
	// [1, MaxConcurrency].
	Limit int
	// Status is the answer to a request over Limit: 429 Too Many
	// Requests (0 means 429) or 503 Service Unavailable.
	Status int
	// RetryAfter is the Retry-After of that answer, in whole seconds
	// rounded up, at least 1; 0 means DefaultConcurrencyRetryAfter, and
	// at most MaxBanDuration.
	RetryAfter time.Duration
}

// StatusCode returns the status of a request over the limit: Status, or
// 429 if it is 0.
func (c *Concurrency) StatusCode() int {
	if c.Status == 0 {
		return http.StatusTooManyRequests
	}
	return c.Status
}

// RetryAfterOrDefault returns RetryAfter, or DefaultConcurrencyRetryAfter
// if it is 0.
func (c *Concurrency) RetryAfterOrDefault() time.Duration {
	if c.RetryAfter == 0 {
		return DefaultConcurrencyRetryAfter
	}
	return c.RetryAfter
}

// validate checks c.
func (c *Concurrency) validate() error {
	if c.Limit < 1 || c.Limit > MaxConcurrency {
		return fmt.Errorf("concurrency: limit %d outside [1, %d]", c.Limit, MaxConcurrency)
	}
	if c.Status != 0 && c.Status != http.StatusTooManyRequests && c.Status != http.StatusServiceUnavailable {
		return fmt.Errorf("concurrency: status %d is neither 429 nor 503", c.Status)
	}
	if c.RetryAfter < 0 || c.RetryAfter > MaxBanDuration {
		return fmt.Errorf("concurrency: retry_after %v outside [0, %v]", c.RetryAfter, MaxBanDuration)
	}
	return nil
}

// checkPolicies checks the ban and concurrency of rule ru.
func checkPolicies(ru *Rule) error {
	if ru.Ban != nil {
		if err := ru.Ban.validate(); err != nil {
			return invalid("rule %q: %v", ru.Name, err)
		}
	}
	if ru.Concurrency != nil {
		if err := ru.Concurrency.validate(); err != nil {
			return invalid("rule %q: %v", ru.Name, err)
		}
	}
	return nil
}

// BanEntry is one ban in force, as a middleware's Bans lists it.
type BanEntry struct {
	// Rule names the rule the client is banned on.
	Rule string
	// Key is the client key, as DeniedKey.Key gives it: "ip:192.0.2.1",
	// "ip:2001:db8::/64", "id:client-1".
	Key string
	// Until is when the ban ends, on the middleware's clock.
	Until time.Time
	// Remaining is Until less the clock's now when the list was made.
	Remaining time.Duration
	// Offences is the number of bans of the client on the rule that its
	// length was grown by (1 for a first ban); 0 for a ban set by SetBan
	// or learnt from the BanStore.
	Offences int
}

// StoredBan is one ban in a BanStore: a rule's key namespace
// (KeyNamespace) and a client key, and when the ban ends.
type StoredBan struct {
	// Namespace is KeyNamespace of the rule's name.
	Namespace string
	// Key is the client key.
	Key string
	// Until is when the ban ends.
	Until time.Time
}

// BanStore shares bans between the nodes of a cluster (package sync's
// BanStore keeps them in Redis). The middleware calls it from one
// goroutine of its own, never on a request's path: it writes each ban
// that starts or is set, and each lift, and every Options.BanSyncInterval
// reads the bans in force, which every node then enforces. Its methods
// must honour ctx's deadline.
type BanStore interface {
	// PutBan records b at instant now of the writer's clock (the
	// middleware's); a ban of the same namespace and key that ends later
	// is kept. The store may forget b once b.Until - now has passed.
	PutBan(ctx context.Context, b StoredBan, now time.Time) error
	// LiftBan removes the ban of key on the rule of namespace ns.
	LiftBan(ctx context.Context, ns, key string) error
	// ActiveBans returns the bans that end after now, at most limit of
	// them, and whether it returned them all.
	ActiveBans(ctx context.Context, now time.Time, limit int) (bans []StoredBan, complete bool, err error)
}

// DefaultBanSyncInterval is Options.BanSyncInterval when it is 0.
const DefaultBanSyncInterval = 100 * time.Millisecond

// checkPolicyOptions checks the options of bans and in-flight slots.
func (o *Options) checkPolicyOptions() error {
	if o.MaxPolicyKeys < 0 || o.MaxPolicyKeys > MaxPolicyKeysLimit {
		return fmt.Errorf("%w: max policy keys %d outside [0, %d]", shardlimit.ErrInvalidConfig, o.MaxPolicyKeys, MaxPolicyKeysLimit)
	}
	if o.BanSyncInterval < 0 || o.BanSyncInterval > time.Minute {
		return fmt.Errorf("%w: ban sync interval %v outside [0, 1m]", shardlimit.ErrInvalidConfig, o.BanSyncInterval)
	}
	return nil
}

// PolicyStats are a middleware's counters of bans (Rule.Ban) and
// concurrency limits (Rule.Concurrency), since it was built.
type PolicyStats struct {
	// Banned counts requests refused because their client was banned.
	Banned uint64
	// BansStarted counts bans started by violations (not SetBan's).
	BansStarted uint64
	// ViolationsUntracked counts denials that could not count towards a
	// ban because the ban table was full (Options.MaxPolicyKeys).
	ViolationsUntracked uint64
	// BanTableFull counts bans (SetBan's, or read from the BanStore) that
	// the full ban table could not hold.
	BanTableFull uint64
	// InFlightRefused counts requests refused for having their rule's
	// Concurrency.Limit in flight; InFlightTableFull those refused because
	// the in-flight table had no room for their client.
	InFlightRefused, InFlightTableFull uint64
	// StoreErrors counts failed calls to Options.BanStore; StoreDropped
	// bans and lifts not written to it because its queue was full.
	StoreErrors, StoreDropped uint64
	// StoreWrites counts bans and lifts written to the BanStore;
	// StoreReads the reads of its bans in force that succeeded.
	StoreWrites, StoreReads uint64
}
