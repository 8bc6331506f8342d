package httplimit

import (
	"fmt"
	"net/netip"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/netprefix"
)

// MaxListEntries is the most entries (identities and networks together)
// the exempt and deny lists of a rules file hold, over the lists of all
// rules and those of the rule set: 50,000. Lookups cost the same for any
// number of identities (a map) and grow with the logarithm of the number of
// networks (a sorted table: about 27 ns among 10,000 networks), so the cap
// bounds memory and the time to check a file, not the cost of a request.
const MaxListEntries = 50_000

// ClientList lists clients by identity and by network: the exempt and
// deny lists of a rule set (Rules.Exempt, Rules.Deny) and of a rule
// (Rule.Exempt, Rule.Deny). Its JSON form is
//
//	{"clients": ["health-checker"], "networks": ["10.0.0.0/8", "2001:db8::/32", "192.0.2.7"]}
//
// A request is on the list if its identity is one of Clients or its
// client address is in one of Networks.
type ClientList struct {
	// Clients are client identities (KeyConfig.Header values or key
	// function results), compared byte for byte with the identity as the
	// request gives it, whether or not a tier or override lists it (see
	// KeyConfig.UnknownIdentity, which governs keys, not lists). Empty
	// strings are refused. An identity is whatever the client sends
	// unless it is authenticated before the middleware: exempting one a
	// client can choose exempts whoever sends it.
	Clients []string `json:"clients,omitempty"`
	// Networks are client networks, CIDR ("10.0.0.0/8", "2001:db8::/32")
	// or single addresses, matched against the client address (the TCP
	// peer, or the forwarded address from a trusted proxy: see
	// KeyConfig.TrustedProxies). IPv4-mapped IPv6 networks and addresses
	// are taken as the IPv4 ones they map; an IPv6 network never holds an
	// IPv4 address ("::/0" is every IPv6 client, no IPv4 one).
	Networks []string `json:"networks,omitempty"`
}

// Len returns the number of entries of l: identities and networks.
func (l *ClientList) Len() int { return len(l.Clients) + len(l.Networks) }

// parsedList is a validated ClientList: its identities and networks, with
// the networks' Set for overlap checks.
type parsedList struct {
	clients []string
	ids     map[string]bool
	nets    []netip.Prefix
	src     []string // the networks as written, for errors
	set     netprefix.Set
}

// parseList checks l, the kind ("exempt" or "deny") list of what (a rule,
// or "the rule set"), and returns it parsed.
func parseList(what, kind string, l ClientList) (parsedList, error) {
	p := parsedList{clients: l.Clients, ids: make(map[string]bool, len(l.Clients)), src: l.Networks}
	for _, c := range l.Clients {
		if c == "" {
			return p, invalid("%s: empty client in the %s list", what, kind)
		}
		p.ids[c] = true
	}
	for _, n := range l.Networks {
		pfx, err := netprefix.Parse(n)
		if err != nil {
			return p, invalid("%s: %s network %q: %v", what, kind, n, err)
		}
		p.nets = append(p.nets, pfx)
	}
	p.set = netprefix.NewSet(p.nets)
	return p, nil
}

// checkExemptDeny refuses a client both on exempt list e (of eOf) and on
// deny list d (of dOf), for what: one identity on both, or an exempt
// network and a deny network sharing any address (one holds the other,
// or they are one network). A single address inside a denied network
// counts: the lists hold no exceptions to one another.
func checkExemptDeny(what string, e parsedList, eOf string, d parsedList, dOf string) error {
	for _, c := range e.clients {
		if d.ids[c] {
			return invalid("%s: client %q is both exempt (%s) and denied (%s)", what, c, eOf, dOf)
		}
	}
	for i, p := range e.nets {
		if !d.set.Overlaps(p) {
			continue
		}
		for j, q := range d.nets {
			if q.Overlaps(p) {
				return invalid("%s: exempt network %q (%s) overlaps deny network %q (%s): a client cannot be both exempt and denied",
					what, e.src[i], eOf, d.src[j], dOf)
			}
		}
	}
	return nil
}

// checkLists checks the exempt and deny lists of r and of each of its
// rules (each alone, then that no client is both exempt and denied where
// both lists apply: the rule set's and the rule's).
func (r *Rules) checkLists() error {
	const all = "the rule set's"
	ge, err := parseList("rule set", "exempt", r.Exempt)
	if err != nil {
		return err
	}
	gd, err := parseList("rule set", "deny", r.Deny)
	if err != nil {
		return err
	}
	if err := checkExemptDeny("rule set", ge, all, gd, all); err != nil {
		return err
	}
	check := func(ru *Rule) error {
		if ru.Exempt.Len() == 0 && ru.Deny.Len() == 0 {
			return nil
		}
		what := fmt.Sprintf("rule %q", ru.Name)
		re, err := parseList(what, "exempt", ru.Exempt)
		if err != nil {
			return err
		}
		rd, err := parseList(what, "deny", ru.Deny)
		if err != nil {
			return err
		}
		for _, c := range []struct {
			e, d     parsedList
			eOf, dOf string
		}{{re, rd, "its own", "its own"}, {re, gd, "its own", all}, {ge, rd, all, "its own"}} {
			if err := checkExemptDeny(what, c.e, c.eOf, c.d, c.dOf); err != nil {
				return err
			}
		}
		return nil
	}
	for i := range r.Rules {
		if err := check(&r.Rules[i]); err != nil {
			return err
		}
	}
	for _, t := range r.Tiers {
		for i := range t.Rules {
			if err := check(&t.Rules[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// listEntries returns the number of entries of every exempt and deny list
// of r.
func (r *Rules) listEntries() int {
	n := r.Exempt.Len() + r.Deny.Len()
	for _, ru := range r.Rules {
		n += ru.Exempt.Len() + ru.Deny.Len()
	}
	for _, t := range r.Tiers {
		for _, ru := range t.Rules {
			n += ru.Exempt.Len() + ru.Deny.Len()
		}
	}
	return n
}

// checkListCap checks r's lists against MaxListEntries (a rules file's cap).
func (r *Rules) checkListCap() error {
	if n := r.listEntries(); n > MaxListEntries {
		return fmt.Errorf("%w: the exempt and deny lists hold %d entries, more than the %d (MaxListEntries) a rules file may list",
			shardlimit.ErrInvalidConfig, n, MaxListEntries)
	}
	return nil
}

// ErrorPass is what a middleware's error hook (the ErrorStatus field of
// httpmw.Config and fasthttpmw.Config) returns to let a request whose
// decision failed through to the next handler, as FailOpen does.
const ErrorPass = 0

// ErrorStatusOf returns the answer an error hook's result status stands
// for: ErrorPass (0) lets the request through; a status in [400, 599] is
// answered with a text/plain body; any other value is taken as 503
// Service Unavailable, as FailClosed answers, so a hook's mistake never
// lets a request through unlimited. pass reports the first case.
func ErrorStatusOf(status int) (code int, pass bool) {
	switch {
	case status == ErrorPass:
		return 0, true
	case status >= 400 && status <= 599:
		return status, false
	}
	return 503, false
}

// policyToJSON sets the policy fields of j, r's JSON form.
func (r *Rule) policyToJSON(j *ruleJSON) {
	j.Shadow = r.Shadow
	if r.Exempt.Len() > 0 {
		j.Exempt = &r.Exempt
	}
	if r.Deny.Len() > 0 {
		j.Deny = &r.Deny
	}
}

// policyFromJSON sets r's policy fields from j, its JSON form.
func (r *Rule) policyFromJSON(j *ruleJSON) {
	r.Shadow = j.Shadow
	if j.Exempt != nil {
		r.Exempt = *j.Exempt
	}
	if j.Deny != nil {
		r.Deny = *j.Deny
	}
}

// cond returns a if c, else b.
func cond[T any](c bool, a, b T) T {
	if c {
		return a
	}
	return b
}
