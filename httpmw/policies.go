package httpmw

import (
	"net/http"
	"time"

	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwengine"
)

// serveHeld calls next for a request holding an in-flight slot
// (httplimit.Concurrency) and gives the slot back when next returns,
// normally or by a panic, which then goes on to net/http (which recovers
// it, http.ErrAbortHandler included, and closes the connection). A client
// that goes away cancels r.Context(); the slot is free once the handler
// returns.
func (m *Middleware) serveHeld(w http.ResponseWriter, r *http.Request, next http.Handler, f mwengine.InFlight) {
	defer m.e.Release(f)
	next.ServeHTTP(w, r)
}

// Bans returns the bans in force (httplimit.Ban) on the rules in force,
// by rule and client key, with the time each has left on the middleware's
// clock.
func (m *Middleware) Bans() []httplimit.BanEntry { return m.e.Bans() }

// SetBan bans client key ("ip:192.0.2.1", "id:client-1": as Bans and
// TopDenied list keys; an address, or a network no wider than a group,
// names the group KeyConfig's prefix lengths put it in) on the rule named rule for d, in (0, httplimit.MaxBanDuration],
// or keeps a ban in force that ends later; with Options.BanStore every
// node enforces it within BanSyncInterval. The rule need not have a Ban,
// but must not be a shadow rule, and an "id:" key must be one requests
// have (an identity the rules list, unless KeyConfig.UnknownIdentity is
// UnknownIdentityOwnKey). Errors wrap shardlimit.ErrInvalidConfig
// (unknown rule, shadow rule, malformed key or one no request has, bad d) or shardlimit.ErrTooManyKeys (the ban table is full), or are
// shardlimit.ErrClosed.
func (m *Middleware) SetBan(rule, key string, d time.Duration) error {
	return m.e.SetBan(rule, key, d)
}

// LiftBan ends the ban of client key (as SetBan takes it) on the rule
// named rule, on every node with Options.BanStore, and forgets the
// client's violations and offences there; it reports whether a ban was in
// force on this node. Errors are SetBan's, but it lifts bans SetBan would
// refuse to set as meeting no request (a reload can leave them).
func (m *Middleware) LiftBan(rule, key string) (bool, error) { return m.e.LiftBan(rule, key) }

// PolicyStats returns the counters of bans and concurrency limits.
func (m *Middleware) PolicyStats() httplimit.PolicyStats { return m.e.PolicyStats() }

// InFlight returns the number of requests client key (as SetBan takes
// it, but not grouped) has in flight on the rule named rule.
func (m *Middleware) InFlight(rule, key string) int { return m.e.InFlightCount(rule, key) }
