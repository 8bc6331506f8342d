package httplimit

import (
	"crypto/sha256"
	"encoding/hex"
)

// KeyNamespaceLen is the length in bytes of every KeyNamespace: 8
// hexadecimal digits and a colon.
const KeyNamespaceLen = 9

// KeyNamespace returns the namespace of the rule named rule in the store of
// a limiter that Options.NewLimiter builds: the middleware puts it before
// every client key it passes to that limiter (decisions, and the per-client
// limits of overrides), so "ip:192.0.2.9" on rule "search" is the limiter
// key "e2d7a4c3:ip:192.0.2.9" (digits for illustration). It is the first 8
// hexadecimal digits of the SHA-256 digest of the name, and a colon:
// KeyNamespaceLen bytes whatever the name.
//
// So the rules' limiters never count one another's requests, whatever
// their store: limiters of package sync built with one Prefix for every
// rule keep each rule's counters under keys of its own
// ("prefix:{e2d7a4c3:ip:192.0.2.9}:..."). The namespace depends on the
// name alone: a reload that keeps a rule's name keeps its keys, in any
// order of the rules, and the nodes of a cluster running a rule of one
// name share its counters; renaming a rule gives its clients fresh
// counters. Validation refuses two rules of one rule set whose names have
// one namespace (the first 32 bits of two digests equal, about one chance
// in 9,000 among 1,000 rules): rename one of them.
//
// The limiters the middleware builds itself (NewLimiter nil) are separate
// tables in memory, one per rule, so it passes them the client key alone
// (RuleStats.KeyPrefix is then empty).
func KeyNamespace(rule string) string {
	sum := sha256.Sum256([]byte(rule))
	var b [KeyNamespaceLen]byte
	hex.Encode(b[:KeyNamespaceLen-1], sum[:(KeyNamespaceLen-1)/2])
	b[KeyNamespaceLen-1] = ':'
	return string(b[:])
}

// checkKeyNamespaces checks that no two rules of r have one KeyNamespace.
func (r *Rules) checkKeyNamespaces() error {
	seen := make(map[string]string, r.NumRules())
	check := func(rules []Rule) error {
		for _, ru := range rules {
			ns := KeyNamespace(ru.Name)
			if prev, dup := seen[ns]; dup && prev != ru.Name {
				return invalid("rules %q and %q have one key namespace %q (KeyNamespace): their limiters would share counters in a store; rename one of them",
					prev, ru.Name, ns)
			}
			seen[ns] = ru.Name
		}
		return nil
	}
	if err := check(r.Rules); err != nil {
		return err
	}
	for _, t := range r.Tiers {
		if err := check(t.Rules); err != nil {
			return err
		}
	}
	return nil
}
