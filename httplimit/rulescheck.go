package httplimit

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/shardlimit/shardlimit"
)

// MaxOverrideLimits is the most per-client limits a rule set's overrides
// may expand to: 100,000. An override naming a rule sets one; an override
// without a rule applies to every rule, so sets one per rule. Each is a
// key stored with its limit in its rule's limiter, set when the
// middleware is built and on every reload: 1,000 rules and 1,000 rule-less
// overrides, an 83 KB file within the other caps, expanded to a million
// and took seconds and hundreds of MiB in New. Validate applies it, to
// rules files and rules built in Go alike.
const MaxOverrideLimits = 100_000

// checkNamesAndCaps checks what validate's per-rule pass does not: every
// rule has a name (naming an unnamed one by its place), rule and tier
// names hold no control characters (bytes below 0x20, and 0x7f: they
// would be printed raw by status pages and logs, a newline splitting a
// row), methods are HTTP tokens (RFC 9110, section 5.6.2), no two rules
// have one KeyNamespace, and the overrides expand to at most
// MaxOverrideLimits per-client limits.
func (r *Rules) checkNamesAndCaps() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{shardlimit.ErrInvalidConfig}, args...)...)
	}
	checkRules := func(tier string, ti int, rules []Rule) error {
		for i, ru := range rules {
			if ru.Name == "" {
				if ti < 0 {
					return bad("rule #%d of the default rules (rules[%d]) has no name", i+1, i)
				}
				return bad("rule #%d of tier %q (tiers[%d].rules[%d]) has no name", i+1, tier, ti, i)
			}
			if j := controlByte(ru.Name); j >= 0 {
				return bad("rule %q: name holds control character 0x%02x at byte %d", ru.Name, ru.Name[j], j)
			}
			for _, m := range ru.Methods {
				if !isToken(m) {
					return bad("rule %q: bad method %q: not an HTTP token (RFC 9110 tchar: letters, digits and !#$%%&'*+-.^_`|~)", ru.Name, m)
				}
			}
		}
		return nil
	}
	if err := checkRules("", -1, r.Rules); err != nil {
		return err
	}
	for ti, t := range r.Tiers {
		if j := controlByte(t.Name); j >= 0 {
			return bad("tier %q: name holds control character 0x%02x at byte %d", t.Name, t.Name[j], j)
		}
		if err := checkRules(t.Name, ti, t.Rules); err != nil {
			return err
		}
	}
	if err := r.checkKeyNamespaces(); err != nil {
		return err
	}
	return r.checkOverrideLimits()
}

// checkOverrideLimits checks that r's overrides expand to at most
// MaxOverrideLimits per-client limits.
func (r *Rules) checkOverrideLimits() error {
	every, one := 0, 0
	for _, o := range r.Overrides {
		if o.Rule == "" {
			every++
		} else {
			one++
		}
	}
	if n := every*r.NumRules() + one; n > MaxOverrideLimits {
		return fmt.Errorf("%w: the overrides expand to %d per-client limits (%d without a rule, so on each of %d rules, and %d on one rule), more than the %d (MaxOverrideLimits) a rule set may hold; name the rule of each override where one is meant",
			shardlimit.ErrInvalidConfig, n, every, r.NumRules(), one, MaxOverrideLimits)
	}
	return nil
}

// controlByte returns the index of the first control character (a byte
// below 0x20, or 0x7f) in s, or -1.
func controlByte(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return i
		}
	}
	return -1
}

// isToken reports whether s is an HTTP token: one or more tchar (RFC 9110,
// section 5.6.2).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c < 0x80 && c != 0 && strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// checkFileText checks that a rules file is UTF-8 without a byte order
// mark: encoding/json would silently turn each invalid byte in a string
// (a path, a name, an override's id, a tier's client) into U+FFFD, so a
// rule would match a path other than the one written; and it refuses a
// byte order mark with a message of its own rather than a syntax error.
func checkFileText(data []byte) error {
	if len(data) >= 3 && data[0] == 0xef && data[1] == 0xbb && data[2] == 0xbf {
		return fmt.Errorf("%w: the rules file starts with a byte order mark (U+FEFF), which is not allowed: save it as UTF-8 without one",
			shardlimit.ErrInvalidConfig)
	}
	return checkUTF8(data)
}

// checkUTF8 refuses data that is not valid UTF-8, giving the offset of the
// first byte that is not, from the start of data.
func checkUTF8(data []byte) error {
	if utf8.Valid(data) {
		return nil
	}
	for i := 0; i < len(data); {
		c, size := utf8.DecodeRune(data[i:])
		if c == utf8.RuneError && size <= 1 {
			return fmt.Errorf("%w: the rules file is not valid UTF-8: byte offset %d (0x%02x)",
				shardlimit.ErrInvalidConfig, i, data[i])
		}
		i += size
	}
	return nil
}
