package mwengine

import (
	"fmt"
	"net/netip"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// checkOverrideKeys refuses two overrides of r (validated) for the same
// rule, or both for every rule, whose clients are one client key under the
// engine's KeyConfig: two addresses in one IPv6 /64 (KeyConfig.IPv6Prefix)
// or one IPv4 prefix group (KeyConfig.IPv4Prefix). Only one limit can be
// stored per key, so the later one would silently replace the earlier
// (a block, limit 0, undone by a later limit 1000). Exact duplicates are
// refused by validation before, with their own message. A rule-specific
// override and an every-rule one for the same key are not in conflict: the
// rule-specific one wins on its rule (see httplimit.Override).
func (e *Engine) checkOverrideKeys(r *httplimit.Rules) error {
	type scope struct{ rule, key string }
	seen := map[scope]string{}
	for _, o := range r.Overrides {
		var key []byte
		var grouping string
		if o.ID != "" {
			key = appendIDKey(&e.keys, nil, o.ID)
			grouping = "identity key"
		} else {
			a, err := netip.ParseAddr(o.IP)
			if err != nil {
				continue // validation refuses it
			}
			key = e.keys.appendAddrKey(nil, a)
			if a.Unmap().Is4() {
				grouping = fmt.Sprintf("/%d grouping (KeyConfig.IPv4Prefix)", e.keys.v4Bits)
			} else {
				grouping = fmt.Sprintf("/%d grouping (KeyConfig.IPv6Prefix)", e.keys.v6Bits)
			}
		}
		what := o.ID + o.IP
		sc := scope{rule: o.Rule, key: string(key)}
		prev, dup := seen[sc]
		if !dup {
			seen[sc] = what
			continue
		}
		on := fmt.Sprintf("rule %q", o.Rule)
		if o.Rule == "" {
			on = "every rule (no \"rule\" given)"
		}
		return fmt.Errorf("%w: overrides %q and %q are one client key under the %s, %s, on %s: the second would replace the first; give one override per client key",
			shardlimit.ErrInvalidConfig, prev, what, grouping, key, on)
	}
	return nil
}
