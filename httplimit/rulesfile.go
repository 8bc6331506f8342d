package httplimit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/shardlimit/shardlimit"
)

// Caps of a rules file: the JSON form of Rules, as ParseRules, ReadRules,
// LoadRules and json.Unmarshal into a Rules (or a Rule, Override or Rate)
// read it. A file beyond any of them is refused with an error wrapping
// shardlimit.ErrInvalidConfig that names the rule (or tier, or override)
// and the cap. Rules built in Go are checked by Validate without these
// caps (their windows may be as short as 1ns, as shardlimit.Config's).
const (
	// MaxRulesFileBytes is the largest rules file accepted, in bytes:
	// 1 MiB. The demo's seed file is under 2 KiB and a rule takes about
	// 100-200 bytes, so MaxRules rules fit with room to spare, while
	// decoding (which holds the input and the decoded value, a few times
	// its size) stays bounded. Larger input is refused before it is
	// parsed; ReadRules and LoadRules read at most MaxRulesFileBytes+1
	// bytes to tell.
	MaxRulesFileBytes = 1 << 20

	// MaxRules is the most rules a rules file holds, default and tier rules
	// together: 1,000. Each rule has a limiter of its own (its shards, a
	// place on the janitor's schedule, up to Options.Limiter.MaxKeys keys)
	// and series of its own in metrics and on the demo's status page, so
	// the count bounds memory and output; hand-written rule sets hold tens.
	MaxRules = 1000

	// MaxNameBytes is the longest rule or tier name, and the longest
	// policy name (Rule.Policy, Rate.Policy), in a rules file, in bytes:
	// 128. Names appear in Decision.Rule and Decision.Tier, metric labels,
	// log lines, Redis key prefixes and, as the default IETF policy name,
	// in every limited response's RateLimit-Policy and RateLimit fields.
	MaxNameBytes = 128

	// MaxTiers is the most tiers a rules file holds: 100. A tier is a
	// group of clients with rules of their own; its rules count against
	// MaxRules.
	MaxTiers = 100

	// MaxTierClients is the most identities the tiers of a rules file list
	// in Clients, over all tiers: 10,000. Clients are looked up in a map,
	// so the cap bounds memory, not the cost of a request.
	MaxTierClients = 10_000

	// MaxTierNetworks is the most networks the tiers of a rules file list
	// in Networks, over all tiers: 1,000. A request whose identity is in
	// no tier is compared with each network in turn, so the cap bounds
	// the cost of a request.
	MaxTierNetworks = 1000

	// MaxOverrides is the most overrides a rules file holds: 10,000 (per
	// client limits of, say, one per API customer). An override without a
	// rule applies to every rule; what they expand to is capped by
	// MaxOverrideLimits.
	MaxOverrides = 10_000

	// MaxRuleMethods is the most methods a rule of a rules file lists:
	// 16, above the 9 methods of RFC 9110 and PATCH.
	MaxRuleMethods = 16

	// MinFileWindow is the shortest window of a limit in a rules file:
	// 1 ms. A shorter window means nothing to an HTTP client (a fixed
	// window of 1ns admits its limit at every tick of the clock, so
	// practically without limit); shardlimit.Config and Rules built in Go
	// still accept windows down to 1ns, which tests use.
	MinFileWindow = time.Millisecond
)

// maxJSONDepth is the deepest nesting of arrays and objects the duplicate
// key check walks: a valid rules file nests 7 deep (the file, "tiers", a
// tier, its "rules", a rule, its "limits", a limit).
const maxJSONDepth = 16

// ReadRules reads a JSON rules file from rd and parses it as ParseRules
// does. It reads at most MaxRulesFileBytes+1 bytes: longer input is refused
// with an error wrapping shardlimit.ErrInvalidConfig, without reading the
// rest. A read error is returned as is.
func ReadRules(rd io.Reader) (*Rules, error) {
	b, err := io.ReadAll(io.LimitReader(rd, MaxRulesFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxRulesFileBytes {
		return nil, errFileTooLarge(int64(len(b)), false)
	}
	return ParseRules(b)
}

// LoadRules reads and parses the JSON rules file at path (see Rules for
// the format and MaxRulesFileBytes for the caps). Errors name the path and
// wrap shardlimit.ErrInvalidConfig, or the os error if the file cannot be
// read. A file larger than MaxRulesFileBytes is refused before it is read.
func LoadRules(path string) (*Rules, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > MaxRulesFileBytes {
		return nil, fmt.Errorf("%s: %w", path, errFileTooLarge(fi.Size(), true))
	}
	r, err := ReadRules(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// errFileTooLarge returns the error for a rules file of n bytes, exactly
// if exact, else at least n.
func errFileTooLarge(n int64, exact bool) error {
	more := " or more"
	if exact {
		more = ""
	}
	return fmt.Errorf("%w: the rules file is %d bytes%s, larger than the %d bytes (MaxRulesFileBytes) a rules file may hold",
		shardlimit.ErrInvalidConfig, n, more, MaxRulesFileBytes)
}

// rulesJSON is Rules without its methods, for decoding.
type rulesJSON Rules

// UnmarshalJSON implements json.Unmarshaler for a rules file: it refuses
// input over MaxRulesFileBytes, input that is not valid UTF-8 (the offset
// given is from the start of the rules value), a key given twice in any object (naming
// the key and the rule, tier or override it is in), unknown fields, and
// lists over the caps (MaxRules, MaxTiers, MaxTierClients,
// MaxTierNetworks, MaxOverrides), with errors wrapping
// shardlimit.ErrInvalidConfig. It does not Validate the rules; ParseRules
// does.
func (r *Rules) UnmarshalJSON(b []byte) error {
	if len(b) > MaxRulesFileBytes {
		return errFileTooLarge(int64(len(b)), true)
	}
	if err := checkUTF8(b); err != nil {
		return err
	}
	if err := checkDuplicateKeys(b); err != nil {
		return describeRulesError(b, err)
	}
	var j rulesJSON
	if err := decodeStrict(b, &j); err != nil {
		return err
	}
	out := Rules(j)
	if err := out.checkFileCaps(); err != nil {
		return err
	}
	*r = out
	return nil
}

// checkFileCaps checks the lengths of r's lists against the caps of a
// rules file. Names, windows, methods and a rule's limits are checked as
// each Rule, Override and Rate is decoded.
func (r *Rules) checkFileCaps() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{shardlimit.ErrInvalidConfig}, args...)...)
	}
	if n := r.NumRules(); n > MaxRules {
		// Name the first rule past the cap.
		i := MaxRules
		name := ""
		if i < len(r.Rules) {
			name = r.Rules[i].Name
		} else {
			i -= len(r.Rules)
			for _, t := range r.Tiers {
				if i < len(t.Rules) {
					name = t.Rules[i].Name
					break
				}
				i -= len(t.Rules)
			}
		}
		return bad("rule %s: %d rules, more than the %d (MaxRules) a rules file may hold", quoteName(name), n, MaxRules)
	}
	if len(r.Tiers) > MaxTiers {
		return bad("tier %s: %d tiers, more than the %d (MaxTiers) a rules file may hold",
			quoteName(r.Tiers[MaxTiers].Name), len(r.Tiers), MaxTiers)
	}
	clients, networks := 0, 0
	for _, t := range r.Tiers {
		clients += len(t.Clients)
		networks += len(t.Networks)
		if clients > MaxTierClients {
			return bad("tier %s: the tiers' clients reach %d here, more than the %d (MaxTierClients) a rules file may list",
				quoteName(t.Name), clients, MaxTierClients)
		}
		if networks > MaxTierNetworks {
			return bad("tier %s: the tiers' networks reach %d here, more than the %d (MaxTierNetworks) a rules file may list",
				quoteName(t.Name), networks, MaxTierNetworks)
		}
		if err := checkFileName("tier", t.Name); err != nil {
			return err
		}
	}
	if err := r.checkListCap(); err != nil {
		return err
	}
	if len(r.Overrides) > MaxOverrides {
		o := r.Overrides[MaxOverrides]
		return bad("override %s: %d overrides, more than the %d (MaxOverrides) a rules file may hold",
			quoteName(o.ID+o.IP), len(r.Overrides), MaxOverrides)
	}
	return nil
}

// checkFileName checks a rule's or tier's name (what says which) against
// MaxNameBytes.
func checkFileName(what, name string) error {
	if len(name) > MaxNameBytes {
		return fmt.Errorf("%w: %s %s: name of %d bytes, longer than the %d (MaxNameBytes) a rules file accepts",
			shardlimit.ErrInvalidConfig, what, quoteName(name), len(name), MaxNameBytes)
	}
	return nil
}

// checkFilePolicy checks a policy name of the rule or override what
// against MaxNameBytes.
func checkFilePolicy(what, policy string) error {
	if len(policy) > MaxNameBytes {
		return fmt.Errorf("%w: %s: policy name %s of %d bytes, longer than the %d (MaxNameBytes) a rules file accepts",
			shardlimit.ErrInvalidConfig, what, quoteName(policy), len(policy), MaxNameBytes)
	}
	return nil
}

// checkFileWindow checks a window of the rule or override what against
// MinFileWindow; validation checks the rest of its range.
func checkFileWindow(what string, w time.Duration) error {
	if w < MinFileWindow {
		return fmt.Errorf("%w: %s: window %v outside [%v, %v]: a rules file's windows are at least %v (MinFileWindow)",
			shardlimit.ErrInvalidConfig, what, w, MinFileWindow, shardlimit.MaxWindow, MinFileWindow)
	}
	return nil
}

// quoteName returns name quoted for an error message, cut to MaxNameBytes
// bytes (followed by "...") if longer.
func quoteName(name string) string {
	if len(name) > MaxNameBytes {
		return strconv.Quote(name[:MaxNameBytes]) + "..."
	}
	return strconv.Quote(name)
}

// dupKeyError reports a key given twice in one JSON object, at path (the
// keys and indexes leading to the object, from the outermost value).
type dupKeyError struct {
	path  []any  // string keys and int indexes
	key   string // the second
	first string // the first, equal to key but for case
}

func (e *dupKeyError) Error() string {
	where := "at the top level"
	if len(e.path) > 0 {
		where = "in " + formatPath(e.path)
	}
	if e.first != e.key {
		return fmt.Sprintf("key %q given twice %s, first as %q (keys are matched regardless of case, and must be unique)",
			e.key, where, e.first)
	}
	return fmt.Sprintf("key %q given twice %s (keys must be unique)", e.key, where)
}

// formatPath formats a JSON path: rules[2].limits[0].
func formatPath(path []any) string {
	var sb strings.Builder
	for _, p := range path {
		switch p := p.(type) {
		case int:
			sb.WriteString("[" + strconv.Itoa(p) + "]")
		case string:
			if sb.Len() > 0 {
				sb.WriteByte('.')
			}
			sb.WriteString(p)
		}
	}
	return sb.String()
}

// jsonFrame is an array or object that checkDuplicateKeys is in.
type jsonFrame struct {
	keys    map[string]string // the keys seen, by foldKey; nil for an array
	wantKey bool              // for an object: the next token is a key or '}'
}

// checkDuplicateKeys walks the one JSON value in b and returns a
// *dupKeyError for the first object that gives a key twice (encoding/json
// would silently keep the last), an error wrapping
// shardlimit.ErrInvalidConfig for nesting deeper than maxJSONDepth, or a
// syntax error. Keys are compared as decoded and regardless of case, as
// encoding/json matches them to fields, so "limit", "\u006cimit" and
// "LIMIT" are one key. It walks iteratively, so deep input costs no
// stack.
func checkDuplicateKeys(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // numbers are decoding's to judge, not float64's
	var w keyWalk
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil // decoding reports the missing value
		}
		if err != nil {
			return fmt.Errorf("%w: %w", shardlimit.ErrInvalidConfig, err)
		}
		if done, err := w.step(tok); done || err != nil {
			// Done: one value; what follows is decoding's to refuse.
			return err
		}
	}
}

// keyWalk is where checkDuplicateKeys' walk is: stack[i] is a container;
// path[i] is where in it the walk is: the current key of an object, the
// current index of an array.
type keyWalk struct {
	stack []jsonFrame
	path  []any
}

// step takes the next token, and reports whether it ends the outermost
// value, or an error for a key given twice or nesting too deep.
func (w *keyWalk) step(tok json.Token) (done bool, err error) {
	n := len(w.stack)
	if n > 0 && w.stack[n-1].wantKey {
		return w.key(tok)
	}
	switch tok {
	case json.Delim('{'), json.Delim('['):
		if n >= maxJSONDepth {
			return false, fmt.Errorf("%w: JSON nested more than %d levels deep (in %s)",
				shardlimit.ErrInvalidConfig, maxJSONDepth, formatPath(w.path))
		}
		if tok == json.Delim('{') {
			w.stack, w.path = append(w.stack, jsonFrame{keys: map[string]string{}, wantKey: true}), append(w.path, "")
		} else {
			w.stack, w.path = append(w.stack, jsonFrame{}), append(w.path, 0)
		}
		return false, nil
	case json.Delim(']'):
		w.pop()
	}
	return w.endValue(), nil
}

// key takes tok, a key or the '}' ending the object on top of the stack.
func (w *keyWalk) key(tok json.Token) (done bool, err error) {
	if tok == json.Delim('}') {
		w.pop()
		return w.endValue(), nil
	}
	n := len(w.stack)
	top := &w.stack[n-1]
	key, _ := tok.(string) // Token returns only strings here
	fk := foldKey(key)
	if first, dup := top.keys[fk]; dup {
		return false, &dupKeyError{path: slices.Clone(w.path[:n-1]), key: key, first: first}
	}
	top.keys[fk] = key
	top.wantKey = false
	w.path[n-1] = key
	return false, nil
}

// pop leaves the container on top of the stack.
func (w *keyWalk) pop() {
	n := len(w.stack)
	w.stack, w.path = w.stack[:n-1], w.path[:n-1]
}

// endValue moves past a value in the container on top of the stack, and
// reports whether the stack is empty: the outermost value has ended.
func (w *keyWalk) endValue() bool {
	n := len(w.stack)
	if n == 0 {
		return true
	}
	if w.stack[n-1].keys != nil {
		w.stack[n-1].wantKey = true
	} else {
		w.path[n-1] = w.path[n-1].(int) + 1
	}
	return false
}

// named is what describeRulesError decodes of a rule or tier.
type named struct {
	Name string `json:"name"`
}

// nameOr returns the quoted name of ns[i], or "#i" if it has none.
func nameOr(ns []named, i int) string {
	if i < len(ns) && ns[i].Name != "" {
		return quoteName(ns[i].Name)
	}
	return "#" + strconv.Itoa(i)
}

// fileNames is what describeRulesError decodes of a rules file: the names
// of its rules, tiers and overrides.
type fileNames struct {
	Rules []named `json:"rules"`
	Tiers []struct {
		Name  string  `json:"name"`
		Rules []named `json:"rules"`
	} `json:"tiers"`
	Overrides []struct {
		ID string `json:"id"`
		IP string `json:"ip"`
	} `json:"overrides"`
}

// describeRulesError returns err, an error of checkDuplicateKeys on the
// rules file b, wrapping shardlimit.ErrInvalidConfig and, for a duplicate
// key, naming the rule, tier or override it is in (names decoded from b as
// far as it decodes).
func describeRulesError(b []byte, err error) error {
	var dup *dupKeyError
	if !errors.As(err, &dup) {
		return err
	}
	var names fileNames
	_ = json.Unmarshal(b, &names) // best effort: the names are a courtesy
	what := names.place(dup.path)
	if what == "" {
		return fmt.Errorf("%w: %w", shardlimit.ErrInvalidConfig, dup)
	}
	return fmt.Errorf("%w: %s: %w", shardlimit.ErrInvalidConfig, what, dup)
}

// pathIndex returns the index at path[i], or -1.
func pathIndex(path []any, i int) int {
	if i < len(path) {
		if k, ok := path[i].(int); ok {
			return k
		}
	}
	return -1
}

// place names the rule, tier or override that path (a dupKeyError's) is
// in, or returns "" if it is in none.
func (names *fileNames) place(path []any) string {
	first := ""
	if len(path) > 0 {
		first, _ = path[0].(string)
	}
	i := pathIndex(path, 1)
	switch {
	case i < 0:
		return ""
	case first == "rules":
		return "rule " + nameOr(names.Rules, i)
	case first == "overrides":
		if i < len(names.Overrides) && names.Overrides[i].ID+names.Overrides[i].IP != "" {
			return "override " + quoteName(names.Overrides[i].ID+names.Overrides[i].IP)
		}
		return "override #" + strconv.Itoa(i)
	case first == "tiers":
		return names.tierPlace(path, i)
	}
	return ""
}

// tierPlace names tier i, and the rule of it that path is in if any.
func (names *fileNames) tierPlace(path []any, i int) string {
	var tiers []named
	var rules []named
	for _, t := range names.Tiers {
		tiers = append(tiers, named{t.Name})
	}
	if i < len(names.Tiers) {
		rules = names.Tiers[i].Rules
	}
	what := "tier " + nameOr(tiers, i)
	if j := pathIndex(path, 3); j >= 0 && path[2] == "rules" {
		what = "rule " + nameOr(rules, j) + " of " + what
	}
	return what
}

// foldKey returns s with each rune replaced by the least rune of its
// Unicode simple case folding orbit: foldKey(a) == foldKey(b) exactly when
// strings.EqualFold(a, b), the match encoding/json makes between a key
// and a field name.
func foldKey(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= utf8.RuneSelf || 'a' <= c && c <= 'z' {
			ascii = false
			break
		}
	}
	if ascii {
		return s
	}
	var sb strings.Builder
	for _, r := range s {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		sb.WriteRune(least)
	}
	return sb.String()
}
