package httplimit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/shardlimit/shardlimit"
)

// rateJSON is Rate's JSON form.
type rateJSON struct {
	Limit  *int   `json:"limit"`
	Window string `json:"window"`
	Policy string `json:"policy,omitempty"`
}

// toJSON returns rt's JSON form.
func (rt Rate) toJSON() rateJSON {
	return rateJSON{Limit: &rt.Limit, Window: rt.Window.String(), Policy: rt.Policy}
}

// rate returns the Rate j describes; what names its rule or override in
// errors.
func (j rateJSON) rate(what string) (Rate, error) {
	if j.Limit == nil {
		return Rate{}, fmt.Errorf("%w: %s: a limit in \"limits\" has no \"limit\"", shardlimit.ErrInvalidConfig, what)
	}
	if j.Window == "" {
		return Rate{}, fmt.Errorf("%w: %s: a limit in \"limits\" has no \"window\"", shardlimit.ErrInvalidConfig, what)
	}
	w, err := time.ParseDuration(j.Window)
	if err != nil {
		return Rate{}, fmt.Errorf("%w: %s: window: %v", shardlimit.ErrInvalidConfig, what, err)
	}
	if err := checkFileWindow(what, w); err != nil {
		return Rate{}, err
	}
	if err := checkFilePolicy(what, j.Policy); err != nil {
		return Rate{}, err
	}
	return Rate{Limit: *j.Limit, Window: w, Policy: j.Policy}, nil
}

// ratesFromJSON returns the Rates js describe, for the rule or override
// what: at most shardlimit.MaxRates.
func ratesFromJSON(js []rateJSON, what string) ([]Rate, error) {
	if len(js) == 0 {
		return nil, fmt.Errorf("%w: %s: \"limits\" is empty", shardlimit.ErrInvalidConfig, what)
	}
	if len(js) > shardlimit.MaxRates {
		return nil, fmt.Errorf("%w: %s: %d limits, at most %d (shardlimit.MaxRates)", shardlimit.ErrInvalidConfig, what, len(js), shardlimit.MaxRates)
	}
	out := make([]Rate, len(js))
	for i, j := range js {
		rt, err := j.rate(what)
		if err != nil {
			return nil, err
		}
		out[i] = rt
	}
	return out, nil
}

// ratesToJSON returns the JSON form of rs.
func ratesToJSON(rs []Rate) []rateJSON {
	out := make([]rateJSON, len(rs))
	for i, rt := range rs {
		out[i] = rt.toJSON()
	}
	return out
}

// MarshalJSON implements json.Marshaler with the form UnmarshalJSON reads.
func (rt Rate) MarshalJSON() ([]byte, error) { return json.Marshal(rt.toJSON()) }

// UnmarshalJSON implements json.Unmarshaler: {"limit": 3, "window": "1s"},
// with an optional "policy". It rejects a key given twice, unknown
// fields, a missing limit or window, a window that is not a Go duration
// string or is shorter than MinFileWindow, and a policy name longer than
// MaxNameBytes, with errors wrapping shardlimit.ErrInvalidConfig.
func (rt *Rate) UnmarshalJSON(b []byte) error {
	var j rateJSON
	if err := decodeFile(b, &j, "rate"); err != nil {
		return err
	}
	v, err := j.rate("rate")
	if err != nil {
		return err
	}
	*rt = v
	return nil
}

// ruleJSON is Rule's JSON form.
type ruleJSON struct {
	Name      string      `json:"name"`
	Path      string      `json:"path,omitempty"`
	Prefix    string      `json:"prefix,omitempty"`
	Methods   []string    `json:"methods,omitempty"`
	Algorithm string      `json:"algorithm,omitempty"`
	Limit     *int        `json:"limit,omitempty"`
	Window    string      `json:"window,omitempty"`
	Limits    *[]rateJSON `json:"limits,omitempty"`
	Buckets   int         `json:"buckets,omitempty"`
	Policy    string      `json:"policy,omitempty"`
	Shadow    bool        `json:"shadow,omitempty"`
	Exempt    *ClientList `json:"exempt,omitempty"`
	Deny      *ClientList `json:"deny,omitempty"`
	Count     string      `json:"count,omitempty"`
	CostHdr   string      `json:"cost_header,omitempty"`

	Ban         *banJSON         `json:"ban,omitempty"`
	Concurrency *concurrencyJSON `json:"concurrency,omitempty"`
}

// MarshalJSON implements json.Marshaler with the form UnmarshalJSON reads:
// "limit" and "window", or "limits" when Limits is set.
func (r Rule) MarshalJSON() ([]byte, error) {
	j := ruleJSON{
		Name: r.Name, Path: r.Path, Prefix: r.Prefix, Methods: r.Methods,
		Buckets: r.Buckets, Policy: r.Policy, Count: string(r.Count), CostHdr: r.CostHeader,
	}
	r.policyToJSON(&j)
	if len(r.Limits) > 0 {
		ls := ratesToJSON(r.Limits)
		j.Limits = &ls
	} else {
		j.Limit, j.Window = &r.Limit, r.Window.String()
	}
	if r.Algorithm != 0 {
		j.Algorithm = r.Algorithm.String()
	}
	j.Ban, j.Concurrency = banToJSON(r.Ban), concurrencyToJSON(r.Concurrency)
	return json.Marshal(j)
}

// UnmarshalJSON implements json.Unmarshaler. It rejects a key given twice,
// unknown fields, a missing limit or window, a rule giving both
// "limit"/"window" and "limits", an unknown algorithm, a window that is
// not a Go duration string or is shorter than MinFileWindow, a name or
// policy name longer than MaxNameBytes and more than MaxRuleMethods
// methods or shardlimit.MaxRates limits, with errors wrapping
// shardlimit.ErrInvalidConfig and naming the rule.
func (r *Rule) UnmarshalJSON(b []byte) error {
	var j ruleJSON
	if err := decodeFile(b, &j, "rule"); err != nil {
		return err
	}
	if err := checkFileName("rule", j.Name); err != nil {
		return err
	}
	what := "rule " + quoteName(j.Name)
	if len(j.Methods) > MaxRuleMethods {
		return fmt.Errorf("%w: %s: %d methods, more than the %d (MaxRuleMethods) a rule may list",
			shardlimit.ErrInvalidConfig, what, len(j.Methods), MaxRuleMethods)
	}
	if err := checkFilePolicy(what, j.Policy); err != nil {
		return err
	}
	out := Rule{Name: j.Name, Path: j.Path, Prefix: j.Prefix, Methods: j.Methods,
		Buckets: j.Buckets, Policy: j.Policy, Count: CountOutcome(j.Count), CostHeader: j.CostHdr}
	out.policyFromJSON(&j)
	if err := j.policies(what, &out); err != nil {
		return err
	}
	if err := checkFileOutcome(what, &out); err != nil {
		return err
	}
	if j.Algorithm != "" {
		a, err := shardlimit.ParseAlgorithm(j.Algorithm)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		out.Algorithm = a
	}
	if j.Limits != nil {
		if j.Limit != nil || j.Window != "" {
			return fmt.Errorf("%w: %s: both \"limit\"/\"window\" and \"limits\" given; use \"limits\" alone for several limits",
				shardlimit.ErrInvalidConfig, what)
		}
		ls, err := ratesFromJSON(*j.Limits, what)
		if err != nil {
			return err
		}
		out.Limits = ls
		*r = out
		return nil
	}
	if j.Limit == nil {
		return fmt.Errorf("%w: %s: missing limit (\"limit\" and \"window\", or \"limits\")", shardlimit.ErrInvalidConfig, what)
	}
	out.Limit = *j.Limit
	if j.Window == "" {
		return fmt.Errorf("%w: %s: missing window", shardlimit.ErrInvalidConfig, what)
	}
	w, err := time.ParseDuration(j.Window)
	if err != nil {
		return fmt.Errorf("%w: %s: window: %v", shardlimit.ErrInvalidConfig, what, err)
	}
	if err := checkFileWindow(what, w); err != nil {
		return err
	}
	out.Window = w
	*r = out
	return nil
}

// overrideJSON is Override's JSON form.
type overrideJSON struct {
	Rule   string      `json:"rule,omitempty"`
	ID     string      `json:"id,omitempty"`
	IP     string      `json:"ip,omitempty"`
	Limit  *int        `json:"limit,omitempty"`
	Limits *[]rateJSON `json:"limits,omitempty"`
}

// MarshalJSON implements json.Marshaler with the form UnmarshalJSON reads:
// "limit", or "limits" when Limits is set.
func (o Override) MarshalJSON() ([]byte, error) {
	j := overrideJSON{Rule: o.Rule, ID: o.ID, IP: o.IP}
	if len(o.Limits) > 0 {
		ls := ratesToJSON(o.Limits)
		j.Limits = &ls
	} else {
		j.Limit = &o.Limit
	}
	return json.Marshal(j)
}

// UnmarshalJSON implements json.Unmarshaler, rejecting a key given twice,
// unknown fields, a missing limit, an override giving both "limit" and
// "limits", more than shardlimit.MaxRates limits and a window shorter
// than MinFileWindow, with errors wrapping shardlimit.ErrInvalidConfig
// and naming the override.
func (o *Override) UnmarshalJSON(b []byte) error {
	var j overrideJSON
	if err := decodeFile(b, &j, "override"); err != nil {
		return err
	}
	what := "override " + quoteName(j.ID+j.IP)
	out := Override{Rule: j.Rule, ID: j.ID, IP: j.IP}
	switch {
	case j.Limits != nil && j.Limit != nil:
		return fmt.Errorf("%w: %s: both \"limit\" and \"limits\" given", shardlimit.ErrInvalidConfig, what)
	case j.Limits != nil:
		ls, err := ratesFromJSON(*j.Limits, what)
		if err != nil {
			return err
		}
		out.Limits = ls
	case j.Limit != nil:
		out.Limit = *j.Limit
	default:
		return fmt.Errorf("%w: %s: missing limit (\"limit\", or \"limits\" per window)", shardlimit.ErrInvalidConfig, what)
	}
	*o = out
	return nil
}

// decodeStrict decodes one JSON value from b into v, rejecting unknown
// fields and trailing data, with errors wrapping
// shardlimit.ErrInvalidConfig.
func decodeStrict(b []byte, v any) error {
	err := decodeJSON(b, v)
	if err == nil || errors.Is(err, shardlimit.ErrInvalidConfig) {
		return err
	}
	return withSyntaxPlace(b, err)
}

// errTrailingData is decodeJSON's error for bytes after the value.
var errTrailingData = errors.New("trailing data after the JSON value")

// decodeJSON is decodeStrict returning encoding/json's errors as they
// are (and those of the UnmarshalJSON methods it calls, which wrap
// shardlimit.ErrInvalidConfig).
func decodeJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errTrailingData
	}
	return nil
}

// withSyntaxPlace wraps err, an error decoding b, in
// shardlimit.ErrInvalidConfig, and for a syntax error says where in b it
// is, as a line and a column (of bytes, both from 1).
func withSyntaxPlace(b []byte, err error) error {
	var syn *json.SyntaxError
	if !errors.As(err, &syn) || syn.Offset < 1 || syn.Offset > int64(len(b)) {
		return fmt.Errorf("%w: %w", shardlimit.ErrInvalidConfig, err)
	}
	at := int(syn.Offset) - 1 // the offending byte: Offset counts the bytes read
	line := 1 + bytes.Count(b[:at], []byte("\n"))
	col := at - bytes.LastIndexByte(b[:at], '\n')
	return fmt.Errorf("%w: line %d, column %d: %w", shardlimit.ErrInvalidConfig, line, col, err)
}

// decodeFile decodes one JSON value of a rules file from b into v, the
// JSON form of a kind ("rule", "override", "rate"): it rejects a key given
// twice, then decodes as decodeStrict does; its errors name the rule or
// override (a key given twice, an unknown field, a value of the wrong
// type).
func decodeFile(b []byte, v any, kind string) error {
	err := checkDuplicateKeys(b)
	var dup *dupKeyError
	if err != nil && !errors.As(err, &dup) {
		return err
	}
	if err == nil {
		// An error wrapping ErrInvalidConfig is a nested value's, which
		// names itself.
		if err = decodeJSON(b, v); err == nil || errors.Is(err, shardlimit.ErrInvalidConfig) {
			return err
		}
	}
	// Name the rule (or override) as far as b decodes.
	var id struct{ Name, ID, IP string }
	_ = json.Unmarshal(b, &id)
	name := id.Name
	if kind == "override" {
		name = id.ID + id.IP
	}
	if kind == "rate" {
		return fmt.Errorf("%w: %w", shardlimit.ErrInvalidConfig, err)
	}
	return fmt.Errorf("%w: %s %s: %w", shardlimit.ErrInvalidConfig, kind, quoteName(name), err)
}

// ParseRules decodes and validates a JSON rules file (see Rules for the
// format, MaxRulesFileBytes for its caps). Errors wrap
// shardlimit.ErrInvalidConfig and name the offending rule, tier or
// override, or the cap exceeded, or for text that is not JSON the line and
// column of the offending byte (wrapping the *json.SyntaxError); a file
// without rules that does not say
// "limiting": "off" is an error wrapping ErrNoRules too.
func ParseRules(data []byte) (*Rules, error) {
	if len(data) > MaxRulesFileBytes {
		return nil, errFileTooLarge(int64(len(data)), true)
	}
	if err := checkFileText(data); err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%w: %w: the rule file is empty; to turn limiting off on purpose, say so: {\"limiting\": \"off\"}",
			shardlimit.ErrInvalidConfig, ErrNoRules)
	}
	var r Rules
	if err := decodeStrict(data, &r); err != nil {
		return nil, err
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}
