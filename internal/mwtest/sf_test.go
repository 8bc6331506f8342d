package mwtest

import (
	"reflect"
	"testing"
)

// TestParseSFList checks the test parser of structured field Lists on
// values RFC 9651 accepts and refuses, so that the rate-limit fields'
// checks rest on a parser that is itself right.
func TestParseSFList(t *testing.T) {
	p := func(kv ...any) []SFParam {
		var out []SFParam
		for i := 0; i < len(kv); i += 2 {
			out = append(out, SFParam{Key: kv[i].(string), Value: kv[i+1]})
		}
		return out
	}
	for _, tc := range []struct {
		in   string
		want []SFItem
	}{
		{``, nil},
		{`"a"`, []SFItem{{Value: "a"}}},
		{`"burst";q=100;w=60,"daily";q=1000;w=86400`, []SFItem{
			{Value: "burst", Params: p("q", int64(100), "w", int64(60))},
			{Value: "daily", Params: p("q", int64(1000), "w", int64(86400))}}},
		{`"a"  ,	"b"`, []SFItem{{Value: "a"}, {Value: "b"}}},
		{`  "a";r=0;t=0`, []SFItem{{Value: "a", Params: p("r", int64(0), "t", int64(0))}}},
		{`"a\"b\\c"`, []SFItem{{Value: `a"b\c`}}},
		{`foo/bar:baz, *tok;x`, []SFItem{{Value: SFToken("foo/bar:baz")}, {Value: SFToken("*tok"), Params: p("x", true)}}},
		{`-12, 1.5, -0.125, 123456789012.123, 999999999999999`, []SFItem{
			{Value: int64(-12)}, {Value: 1.5}, {Value: -0.125}, {Value: 123456789012.123}, {Value: int64(999999999999999)}}},
		{`:aGVsbG8=:, ?1, ?0;a=?1, :aGVsbG8:`, []SFItem{{Value: []byte("hello")}, {Value: true}, {Value: false, Params: p("a", true)}, {Value: []byte("hello")}}},
		{`@1659578233`, []SFItem{{Value: int64(1659578233)}}},
		{`("a" b);x=1, ()`, []SFItem{{Value: []SFItem{{Value: "a"}, {Value: SFToken("b")}}, Params: p("x", int64(1))}, {Value: []SFItem(nil)}}},
		{`"a";q=1;w=2;q=3`, []SFItem{{Value: "a", Params: p("q", int64(3), "w", int64(2))}}},
		{`"a"; q=1`, []SFItem{{Value: "a", Params: p("q", int64(1))}}},
	} {
		got, err := ParseSFList(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseSFList(%q) = %#v, %v; want %#v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{
		`"a",`, `,"a"`, `"a" "b"`, `"a",,"b"`, `"a`, `"a\x"`, "\"caf\u00e9\"", "\"a\x01\"",
		`"a";Q=1`, `"a";=1`, `"a";q=`, `"a";;q=1`, `"a";1q=2`,
		`1234567890123456`, `1.2345`, `1.`, `1234567890123.5`, `-`, `--1`,
		`:aGVs bG8=:`, `:a:`, `:aGVsbG8=`, `?2`, `?`, `@1.5`, `%"display"`,
		`("a""b")`, `("a"`, `"a")`, `[x]`, `"a";q=1 x`,
	} {
		if got, err := ParseSFList(in); err == nil {
			t.Errorf("ParseSFList(%q) = %#v, want an error", in, got)
		}
	}
}
