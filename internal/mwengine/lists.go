package mwengine

import (
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"

	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/netprefix"
)

// clientList is a compiled httplimit.ClientList: identities in a map,
// networks in a netprefix.Set (sorted, merged ranges searched by binary
// search). Immutable once published.
type clientList struct {
	ids  map[string]struct{}
	nets netprefix.Set
}

// compileList compiles l (validated: its networks parse).
func compileList(l httplimit.ClientList) clientList {
	var c clientList
	if len(l.Clients) > 0 {
		c.ids = make(map[string]struct{}, len(l.Clients))
		for _, id := range l.Clients {
			c.ids[id] = struct{}{}
		}
	}
	ps := make([]netip.Prefix, 0, len(l.Networks))
	for _, n := range l.Networks {
		p, _ := netprefix.Parse(n) // validated
		ps = append(ps, p)
	}
	c.nets = netprefix.NewSet(ps)
	return c
}

// has reports whether the client of identity id (the request's, as sent)
// and address a is on c. It does not allocate.
func has[S byteseq](c *clientList, id S, a netip.Addr) bool {
	if len(id) > 0 && len(c.ids) > 0 {
		if _, ok := c.ids[string(id)]; ok {
			return true
		}
	}
	return c.nets.Contains(a)
}

// lists are the compiled exempt and deny lists of a rule set or a rule.
type lists struct {
	exempt, deny clientList
}

// compileLists returns the compiled lists exempt and deny, nil if both are
// empty (so that a decision skips them with one nil check).
func compileLists(exempt, deny httplimit.ClientList) *lists {
	if exempt.Len() == 0 && deny.Len() == 0 {
		return nil
	}
	return &lists{exempt: compileList(exempt), deny: compileList(deny)}
}

// policyCounts count what the exempt and deny lists and the tier hook did,
// for an engine (the rule set's lists) or a rule's limiter (its own).
type policyCounts struct {
	exempt, denyListed, unknownTier atomic.Uint64
}

// listed decides request q by ls, the lists of rule r (nil for the rule
// set's), into o: true if a list decided it (deny first: Validate refuses a
// client on both). Counted in the engine's counters and r's.
func listed[S byteseq](e *Engine, ls *lists, r *rule, q *Request[S], o *Outcome) bool {
	switch {
	case has(&ls.deny, q.Identity, q.Client):
		e.listCounts.denyListed.Add(1)
		if r != nil {
			r.l.pol.denyListed.Add(1)
		}
		o.Listed = true
		o.Action = httplimit.ActionDenyListed
		if e.dryRun {
			o.Action = httplimit.ActionDryRunDeny
		}
	case has(&ls.exempt, q.Identity, q.Client):
		e.listCounts.exempt.Add(1)
		if r != nil {
			r.l.pol.exempt.Add(1)
		}
		o.Action = httplimit.ActionExempt
	default:
		return false
	}
	o.r = nil // no rate-limit fields
	return true
}

// tierNamed returns the tier a tier hook named (Request.Tier), or def
// (the tier the request's identity or network gives) if the rules in force
// have none of that name, counting it.
func (e *Engine) tierNamed(set *ruleSet, name string, def *tier) *tier {
	if t, ok := set.tiers[name]; ok {
		return t
	}
	e.listCounts.unknownTier.Add(1)
	return def
}

// BodyDenyListed is the 403 body for a client on a deny list.
const BodyDenyListed = "Forbidden: this client is denied access (deny list).\n"

// StatusForbidden is the status of an answer to a client on a deny list.
const StatusForbidden = 403

var bodyDenyListed = []byte(BodyDenyListed)

// Failed reports whether o is a failed decision (ActionFailClosed or
// ActionFailOpen, Result.Err set): what a middleware's error hook decides.
func (o *Outcome) Failed() bool {
	return o.Action == httplimit.ActionFailClosed || o.Action == httplimit.ActionFailOpen
}

// SetErrorStatus applies an error hook's status to o, a failed decision
// (see httplimit.ErrorStatusOf): httplimit.ErrorPass lets it through
// (ActionFailOpen), a status in [400, 599] answers it (ActionFailClosed),
// anything else answers 503.
func SetErrorStatus(o *Outcome, status int) {
	code, pass := httplimit.ErrorStatusOf(status)
	if pass {
		o.Action = httplimit.ActionFailOpen
		return
	}
	o.Action, o.status = httplimit.ActionFailClosed, code
}

// failReply returns the answer to a failed decision under FailClosed: 503
// and BodyUnavailable, or the error hook's status with a body naming it
// ("429 Too Many Requests: rate limiter unavailable.") formatted into sc.Body.
func failReply(sc *Scratch, o *Outcome) Reply {
	if o.status == 0 || o.status == StatusServiceUnavailable {
		return Reply{Status: StatusServiceUnavailable, Body: bodyUnavailable}
	}
	b := append(sc.Body[:0], statusText(o.status)...)
	sc.Body = append(b, ": rate limiter unavailable.\n"...)
	return Reply{Status: o.status, Body: sc.Body}
}

// statusText returns "code reason", such as "429 Too Many Requests".
func statusText(code int) string {
	return strconv.Itoa(code) + " " + http.StatusText(code)
}
