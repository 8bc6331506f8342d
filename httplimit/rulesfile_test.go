package httplimit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
)

// wantRefused checks that err is a refusal wrapping
// shardlimit.ErrInvalidConfig whose message holds every one of msgs.
func wantRefused(t *testing.T, what string, err error, msgs ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: accepted, want refused mentioning %q", what, msgs)
		return
	}
	if !errors.Is(err, shardlimit.ErrInvalidConfig) {
		t.Errorf("%s: error %q does not wrap ErrInvalidConfig", what, err)
	}
	for _, m := range msgs {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("%s: error %q, want it to mention %q", what, err, m)
		}
	}
}

// short cuts a rules file for a test's name.
func short(js string) string {
	if len(js) > 120 {
		return js[:120] + "..."
	}
	return js
}

// TestRulesFileRefusesDuplicateKeys checks that a key given twice in any
// object of a rules file, at any depth, is refused with an error naming
// the key, where it is and the rule, tier or override it is in, instead
// of encoding/json's silently keeping the last.
func TestRulesFileRefusesDuplicateKeys(t *testing.T) {
	const a = `{"name": "a", "path": "/a", "limit": 1, "window": "1m"}`
	for _, tc := range []struct {
		js   string
		msgs []string
	}{
		{`{"rules": [{"name": "a", "path": "/a", "limit": 1, "limit": 1000, "window": "1m"}]}`,
			[]string{`rule "a": key "limit" given twice in rules[0]`}},
		{`{"rules": [` + a + `], "rules": [` + a + `]}`,
			[]string{`key "rules" given twice at the top level`}},
		{`{"limiting": "on", "limiting": "off"}`,
			[]string{`key "limiting" given twice at the top level`}},
		// The name after the duplicate still names the rule; one without
		// a name is named by its index.
		{`{"rules": [` + a + `, {"window": "1m", "window": "1h", "name": "late", "limit": 1}]}`,
			[]string{`rule "late": key "window" given twice in rules[1]`}},
		{`{"rules": [{"limit": 1, "limit": 2, "window": "1m"}]}`,
			[]string{`rule #0: key "limit" given twice in rules[0]`}},
		{`{"rules": [{"name": "a", "name": "b", "limit": 1, "window": "1m"}]}`,
			[]string{`key "name" given twice in rules[0]`}},
		// Escapes and case: encoding/json matches "\u006cimit" and "LIMIT"
		// to the field "limit" as well.
		{`{"rules": [{"name": "a", "limit": 1, "\u006cimit": 1000, "window": "1m"}]}`,
			[]string{`rule "a": key "limit" given twice in rules[0]`}},
		{`{"rules": [{"name": "a", "limit": 1, "LIMIT": 1000, "window": "1m"}]}`,
			[]string{`rule "a": key "LIMIT" given twice in rules[0], first as "limit"`}},
		{`{"rules": [{"name": "a", "limit": 1, "window": "1m", "Window": "1ms"}]}`,
			[]string{`rule "a": key "Window" given twice in rules[0], first as "window"`}},
		// A number no float64 holds does not hide the duplicate.
		{`{"rules": [{"name": "a", "limit": 1e400, "limit": 2, "window": "1m"}]}`,
			[]string{`rule "a": key "limit" given twice in rules[0]`}},
		// Nested objects in arrays.
		{`{"rules": [` + a + `, {"name": "m", "path": "/m", "limits": [{"limit": 3, "window": "1s"}, {"limit": 10, "window": "1m", "window": "1h"}]}]}`,
			[]string{`rule "m": key "window" given twice in rules[1].limits[1]`}},
		{`{"rules": [` + a + `], "tiers": [{"name": "gold", "clients": ["c"], "clients": ["d"], "rules": []}]}`,
			[]string{`tier "gold": key "clients" given twice in tiers[0]`}},
		{`{"rules": [` + a + `], "tiers": [{"name": "gold", "rules": [{"name": "g", "path": "/g", "path": "/h", "limit": 1, "window": "1m"}]}]}`,
			[]string{`rule "g" of tier "gold": key "path" given twice in tiers[0].rules[0]`}},
		{`{"rules": [` + a + `], "tiers": [{"name": "gold", "rules": [{"name": "g", "limits": [{"limit": 1, "limit": 9, "window": "1s"}]}]}]}`,
			[]string{`rule "g" of tier "gold": key "limit" given twice in tiers[0].rules[0].limits[0]`}},
		{`{"rules": [` + a + `], "tiers": [{"rules": [], "name": "t", "name": "u"}]}`,
			[]string{`tier "u": key "name" given twice in tiers[0]`}},
		{`{"rules": [` + a + `], "overrides": [{"rule": "a", "id": "x", "limit": 1, "limit": 0}]}`,
			[]string{`override "x": key "limit" given twice in overrides[0]`}},
		{`{"rules": [` + a + `], "overrides": [{"rule": "a", "ip": "192.0.2.1", "limits": [{"limit": 1, "window": "1m", "window": "1s"}]}]}`,
			[]string{`override "192.0.2.1": key "window" given twice in overrides[0].limits[0]`}},
		// Too deep to be a rules file: refused without recursion.
		{`{"rules": [` + strings.Repeat("[", 20) + strings.Repeat("]", 20) + `]}`,
			[]string{"nested more than 16 levels deep"}},
	} {
		_, err := ParseRules([]byte(tc.js))
		wantRefused(t, short(tc.js), err, tc.msgs...)
	}

	// The same objects in different places, and equal values, are no
	// duplicates.
	if _, err := ParseRules([]byte(`{"rules": [` + a + `, {"name": "b", "path": "/b", "limit": 1, "window": "1m", "methods": ["GET", "POST"]}],
		"tiers": [{"name": "t", "clients": ["x"], "rules": [{"name": "c", "path": "/a", "limit": 1, "window": "1m"}]}]}`)); err != nil {
		t.Errorf("distinct keys refused: %v", err)
	}

	// Decoding a Rule, an Override or a Rate alone refuses them too.
	var ru Rule
	wantRefused(t, "Rule", json.Unmarshal([]byte(`{"name": "a", "limit": 1, "limit": 1000, "window": "1m"}`), &ru),
		`rule "a": key "limit" given twice at the top level`)
	var o Override
	wantRefused(t, "Override", json.Unmarshal([]byte(`{"id": "x", "limit": 1, "limit": 1000}`), &o),
		`override "x": key "limit" given twice`)
	var rt Rate
	wantRefused(t, "Rate", json.Unmarshal([]byte(`{"limit": 1, "window": "1s", "window": "1h"}`), &rt),
		`key "window" given twice`)
	var rs Rules
	wantRefused(t, "Rules", json.Unmarshal([]byte(`{"rules": [{"name": "a", "limit": 1, "limit": 1000, "window": "1m"}]}`), &rs),
		`rule "a": key "limit" given twice in rules[0]`)
}

// TestRulesFileWindowAtLeastOneMillisecond checks that a rules file's
// windows are at least 1 ms, in every place a window is given, while rules
// built in Go keep windows down to 1ns.
func TestRulesFileWindowAtLeastOneMillisecond(t *testing.T) {
	rule := func(w string) string {
		return fmt.Sprintf(`{"rules": [{"name": "a", "path": "/a", "limit": 5, "window": %q}]}`, w)
	}
	multi := func(w string) string {
		return fmt.Sprintf(`{"rules": [{"name": "m", "path": "/m", "limits": [{"limit": 5, "window": %q}, {"limit": 10, "window": "1m"}]}]}`, w)
	}
	tier := func(w string) string {
		return fmt.Sprintf(`{"rules": [{"name": "a", "limit": 1, "window": "1m"}], "tiers": [{"name": "t", "rules": [{"name": "g", "limit": 5, "window": %q}]}]}`, w)
	}
	for _, tc := range []struct{ js, msg string }{
		{rule("1ns"), `rule "a": window 1ns outside [1ms, `},
		{rule("999us"), `rule "a": window 999µs outside [1ms, `},
		{rule("999999ns"), `rule "a": window 999.999µs outside [1ms, `},
		{rule("0s"), `rule "a": window 0s outside [1ms, `},
		{rule("-1m"), `rule "a": window -1m0s outside [1ms, `},
		{multi("1ns"), `rule "m": window 1ns outside [1ms, `},
		{tier("1us"), `rule "g": window 1µs outside [1ms, `},
		{`{"rules": [{"name": "m", "path": "/m", "limits": [{"limit": 5, "window": "1s"}]}], "overrides": [{"rule": "m", "id": "x", "limits": [{"limit": 1, "window": "1ns"}]}]}`,
			`override "x": window 1ns outside [1ms, `},
	} {
		_, err := ParseRules([]byte(tc.js))
		wantRefused(t, tc.js, err, tc.msg, "MinFileWindow")
	}
	for _, js := range []string{rule("1ms"), rule("1000us"), multi("1ms"), tier("1ms")} {
		if _, err := ParseRules([]byte(js)); err != nil {
			t.Errorf("%s: %v", js, err)
		}
	}
	var rt Rate
	wantRefused(t, "Rate", json.Unmarshal([]byte(`{"limit": 1, "window": "1ns"}`), &rt), "window 1ns outside [1ms, ")
	// Go values keep windows down to 1ns.
	r := &Rules{Rules: []Rule{{Name: "a", Limit: 5, Window: 1}, {Name: "m", Path: "/m", Limits: []Rate{{Limit: 1, Window: time.Microsecond}}}}}
	if err := r.Validate(); err != nil {
		t.Errorf("Go rules with windows under 1ms: %v", err)
	}
}

// manyRules returns a rules file of n rules in the default tier and m in
// tier "t", named r0, r1, ... in order, each on a path of its own.
func manyRules(n, m int) string {
	var sb strings.Builder
	rules := func(from, to int) {
		for i := from; i < to; i++ {
			if i > from {
				sb.WriteString(",")
			}
			fmt.Fprintf(&sb, `{"name": "r%d", "path": "/r%d", "limit": 1, "window": "1m"}`, i, i)
		}
	}
	sb.WriteString(`{"rules": [`)
	rules(0, n)
	sb.WriteString(`], "tiers": [{"name": "t", "rules": [`)
	rules(n, n+m)
	sb.WriteString(`]}]}`)
	return sb.String()
}

// list returns n JSON strings formatted from format and 0, 1, ...,
// comma-separated.
func list(n int, format string) string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf(format, i)
	}
	return strings.Join(s, ", ")
}

// TestRulesFileCaps checks each cap of a rules file: a file at the cap is
// accepted, one over it refused with an error wrapping ErrInvalidConfig
// that names the rule, tier or override past the cap, and the cap.
func TestRulesFileCaps(t *testing.T) {
	const a = `{"name": "a", "path": "/a", "limit": 1, "window": "1m"}`
	name := func(n int) string { return strings.Repeat("n", n) }
	methods := func(n int) string { return list(n, `"M%d"`) }
	for _, tc := range []struct {
		what     string
		at, over string
		msgs     []string
	}{
		{"rules", manyRules(MaxRules, 0), manyRules(MaxRules+1, 0),
			[]string{`rule "r1000": 1001 rules, more than the 1000 (MaxRules)`}},
		{"rules over the tiers", manyRules(600, MaxRules-600), manyRules(600, MaxRules-600+1),
			[]string{`rule "r1000": 1001 rules, more than the 1000 (MaxRules)`}},
		{"tiers",
			`{"rules": [` + a + `], "tiers": [` + list(MaxTiers, `{"name": "t%d", "rules": []}`) + `]}`,
			`{"rules": [` + a + `], "tiers": [` + list(MaxTiers+1, `{"name": "t%d", "rules": []}`) + `]}`,
			[]string{`tier "t100": 101 tiers, more than the 100 (MaxTiers)`}},
		{"tier clients",
			`{"rules": [` + a + `], "tiers": [{"name": "t", "rules": [], "clients": [` + list(MaxTierClients/2, `"c%d"`) +
				`]}, {"name": "u", "rules": [], "clients": [` + list(MaxTierClients/2, `"d%d"`) + `]}]}`,
			`{"rules": [` + a + `], "tiers": [{"name": "t", "rules": [], "clients": [` + list(MaxTierClients/2, `"c%d"`) +
				`]}, {"name": "u", "rules": [], "clients": [` + list(MaxTierClients/2+1, `"d%d"`) + `]}]}`,
			[]string{`tier "u": the tiers' clients reach 10001 here, more than the 10000 (MaxTierClients)`}},
		{"tier networks",
			`{"rules": [` + a + `], "tiers": [{"name": "t", "rules": [], "networks": [` + list(MaxTierNetworks, `"2001:db8:%x::/48"`) + `]}]}`,
			`{"rules": [` + a + `], "tiers": [{"name": "t", "rules": [], "networks": [` + list(MaxTierNetworks+1, `"2001:db8:%x::/48"`) + `]}]}`,
			[]string{`tier "t": the tiers' networks reach 1001 here, more than the 1000 (MaxTierNetworks)`}},
		{"overrides",
			`{"rules": [` + a + `], "overrides": [` + list(MaxOverrides, `{"rule": "a", "id": "k%d", "limit": 2}`) + `]}`,
			`{"rules": [` + a + `], "overrides": [` + list(MaxOverrides+1, `{"rule": "a", "id": "k%d", "limit": 2}`) + `]}`,
			[]string{`override "k10000": 10001 overrides, more than the 10000 (MaxOverrides)`}},
		{"methods",
			`{"rules": [{"name": "a", "limit": 1, "window": "1m", "methods": [` + methods(MaxRuleMethods) + `]}]}`,
			`{"rules": [{"name": "a", "limit": 1, "window": "1m", "methods": [` + methods(MaxRuleMethods+1) + `]}]}`,
			[]string{`rule "a": 17 methods, more than the 16 (MaxRuleMethods)`}},
		{"rule name",
			`{"rules": [{"name": "` + name(MaxNameBytes) + `", "limit": 1, "window": "1m"}]}`,
			`{"rules": [{"name": "` + name(MaxNameBytes+1) + `", "limit": 1, "window": "1m"}]}`,
			[]string{`rule "` + name(MaxNameBytes) + `"...: name of 129 bytes, longer than the 128 (MaxNameBytes)`}},
		{"tier name",
			`{"rules": [` + a + `], "tiers": [{"name": "` + name(MaxNameBytes) + `", "rules": []}]}`,
			`{"rules": [` + a + `], "tiers": [{"name": "` + name(MaxNameBytes+1) + `", "rules": []}]}`,
			[]string{`tier "` + name(MaxNameBytes) + `"...: name of 129 bytes, longer than the 128 (MaxNameBytes)`}},
		{"rule policy name",
			`{"rules": [{"name": "a", "limit": 1, "window": "1m", "policy": "` + name(MaxNameBytes) + `"}]}`,
			`{"rules": [{"name": "a", "limit": 1, "window": "1m", "policy": "` + name(MaxNameBytes+1) + `"}]}`,
			[]string{`rule "a": policy name "` + name(MaxNameBytes) + `"... of 129 bytes, longer than the 128 (MaxNameBytes)`}},
		{"limit policy name",
			`{"rules": [{"name": "a", "limits": [{"limit": 1, "window": "1m", "policy": "` + name(MaxNameBytes) + `"}]}]}`,
			`{"rules": [{"name": "a", "limits": [{"limit": 1, "window": "1m", "policy": "` + name(MaxNameBytes+1) + `"}]}]}`,
			[]string{`rule "a": policy name "` + name(MaxNameBytes) + `"... of 129 bytes`}},
		{"override limits",
			`{"rules": [{"name": "m", "limits": [` + list(shardlimit.MaxRates, `{"limit": 5, "window": "%ds"}`) + `]}], "overrides": [{"rule": "m", "id": "x", "limits": [` +
				list(shardlimit.MaxRates, `{"limit": 9, "window": "%ds"}`) + `]}]}`,
			`{"rules": [{"name": "m", "limits": [` + list(shardlimit.MaxRates, `{"limit": 5, "window": "%ds"}`) + `]}], "overrides": [{"rule": "m", "id": "x", "limits": [` +
				list(shardlimit.MaxRates+1, `{"limit": 9, "window": "%ds"}`) + `]}]}`,
			[]string{`override "x": 5 limits, at most 4 (shardlimit.MaxRates)`}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			at := strings.ReplaceAll(tc.at, `"window": "0s"`, `"window": "1h"`) // list counts from 0
			over := strings.ReplaceAll(tc.over, `"window": "0s"`, `"window": "1h"`)
			if _, err := ParseRules([]byte(at)); err != nil {
				t.Errorf("at the cap: %v", err)
			}
			_, err := ParseRules([]byte(over))
			wantRefused(t, "one over the cap", err, tc.msgs...)
		})
	}
}

// sized returns a valid rules file of exactly n bytes, padded with spaces
// inside its object (so that json.Unmarshal hands all n to UnmarshalJSON).
func sized(t *testing.T, n int) []byte {
	t.Helper()
	const js = `{"rules": [{"name": "a", "limit": 1, "window": "1m"}]`
	if n < len(js)+1 {
		t.Fatalf("size %d under %d", n, len(js)+1)
	}
	return []byte(js + strings.Repeat(" ", n-len(js)-1) + "}")
}

// TestRulesFileSizeCap checks that ParseRules, ReadRules and LoadRules
// accept a rules file of exactly MaxRulesFileBytes bytes and refuse one
// byte more, naming the cap.
func TestRulesFileSizeCap(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []int{MaxRulesFileBytes, MaxRulesFileBytes + 1} {
		b := sized(t, n)
		path := filepath.Join(dir, fmt.Sprintf("rules-%d.json", n))
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		_, errParse := ParseRules(b)
		_, errRead := ReadRules(bytes.NewReader(b))
		_, errLoad := LoadRules(path)
		var rs Rules
		errUnmarshal := json.Unmarshal(b, &rs)
		for what, err := range map[string]error{"ParseRules": errParse, "ReadRules": errRead, "LoadRules": errLoad, "json.Unmarshal": errUnmarshal} {
			if n == MaxRulesFileBytes {
				if err != nil {
					t.Errorf("%s of %d bytes: %v", what, n, err)
				}
				continue
			}
			wantRefused(t, fmt.Sprintf("%s of %d bytes", what, n), err, "larger than the 1048576 bytes (MaxRulesFileBytes)")
		}
	}
}

// countingReader is an endless rules file: "{"rules": [" and spaces,
// counting the bytes read.
type countingReader struct {
	n     int64 // bytes read
	limit int64 // the file's size
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.n >= c.limit {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), c.limit-c.n)]
	for i := range p {
		p[i] = ' '
		if c.n == 0 && i < len(`{"rules": [`) {
			p[i] = `{"rules": [`[i]
		}
	}
	c.n += int64(len(p))
	return len(p), nil
}

// TestRulesFileOf100MBRefusedWithoutReadingIt checks that ReadRules
// refuses a 100 MB rules file after reading MaxRulesFileBytes+1 bytes of
// it, allocating a few MiB, and that LoadRules refuses a 100 MB file
// without reading it.
func TestRulesFileOf100MBRefusedWithoutReadingIt(t *testing.T) {
	const size = 100 << 20
	rd := &countingReader{limit: size}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := ReadRules(rd)
	runtime.ReadMemStats(&after)
	wantRefused(t, "ReadRules of 100 MB", err, "MaxRulesFileBytes")
	if rd.n > MaxRulesFileBytes+1 {
		t.Errorf("ReadRules read %d bytes of a 100 MB file, want at most %d", rd.n, MaxRulesFileBytes+1)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("ReadRules allocated %d bytes refusing a 100 MB file, want under 16 MiB", alloc)
	}

	// A sparse file of 100 MB: refused from its size.
	path := filepath.Join(t.TempDir(), "huge.json")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = LoadRules(path)
	runtime.ReadMemStats(&after)
	wantRefused(t, "LoadRules of 100 MB", err, path, "the rules file is 104857600 bytes, larger than the 1048576 bytes (MaxRulesFileBytes)")
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("LoadRules allocated %d bytes refusing a 100 MB file, want under 1 MiB", alloc)
	}
}

// TestSyntaxErrorSaysWhere checks that a rules file that is not JSON (a
// trailing comma, a missing one) is refused with the line and column of
// the offending byte, so a long file need not be searched by hand.
func TestSyntaxErrorSaysWhere(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"{\"rules\":[\n  {\"name\":\"a\",\"path\":\"/a\",\"limit\":5,\"window\":\"1m\",}\n]}", "line 2, column 51:"},
		{"{\"rules\":[\n  {\"name\":\"a\" \"path\":\"/a\"}]}", "line 2, column 15:"},
		{"\n\n   x", "line 3, column 4:"},
	} {
		_, err := ParseRules([]byte(c.in))
		var syn *json.SyntaxError
		if !errors.Is(err, shardlimit.ErrInvalidConfig) || !errors.As(err, &syn) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseRules(%q) = %v; want ErrInvalidConfig and the json.SyntaxError, at %q", c.in, err, c.want)
		}
	}
}

// TestDecodingErrorsNameTheRule checks that an unknown field or a value of
// the wrong type in a rule or override names it, as a key given twice does.
func TestDecodingErrorsNameTheRule(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"rules":[{"name":"a","path":"/a","limit":5,"window":"1m","windw":"1s"}]}`, `rule "a": json: unknown field "windw"`},
		{`{"rules":[{"name":"a","path":"/a","limit":"5","window":"1m"}]}`, `rule "a": json: cannot unmarshal`},
		{`{"overrides":[{"rule":"a","ip":"192.0.2.1","limt":2}],"rules":[{"name":"a","path":"/a","limit":5,"window":"1m"}]}`, `override "192.0.2.1": json: unknown field "limt"`},
	} {
		_, err := ParseRules([]byte(c.in))
		if !errors.Is(err, shardlimit.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) ||
			strings.Count(err.Error(), shardlimit.ErrInvalidConfig.Error()) != 1 {
			t.Errorf("ParseRules(%s) = %v; want ErrInvalidConfig once and %q", c.in, err, c.want)
		}
	}
}
