package httplimit

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
)

// TestBanJSON checks that a rule's ban and concurrency decode, validate
// and encode back to the same rule.
func TestBanJSON(t *testing.T) {
	r, err := ParseRules([]byte(`{"rules": [{"name": "a", "path": "/a", "limit": 5, "window": "1m",
		"ban": {"after": 3, "within": "1m", "for": "15m", "growth": 2, "max": "24h"},
		"concurrency": {"limit": 10, "status": 503, "retry_after": "2s"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	ru := r.Rules[0]
	wantBan := Ban{After: 3, Within: time.Minute, For: 15 * time.Minute, Growth: 2, Max: 24 * time.Hour}
	wantConc := Concurrency{Limit: 10, Status: 503, RetryAfter: 2 * time.Second}
	if ru.Ban == nil || *ru.Ban != wantBan || ru.Concurrency == nil || *ru.Concurrency != wantConc {
		t.Fatalf("decoded %+v %+v", ru.Ban, ru.Concurrency)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseRules(b)
	if err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if !reflect.DeepEqual(back, r) {
		t.Fatalf("round trip: %+v, want %+v", back.Rules[0], r.Rules[0])
	}
}

// TestBanLength checks the length of repeat bans: For x Growth^(n-1), at
// most Max (or its default).
func TestBanLength(t *testing.T) {
	min := time.Minute
	for _, tc := range []struct {
		b    Ban
		n    int
		want time.Duration
	}{
		{Ban{For: 15 * min}, 1, 15 * min},
		{Ban{For: 15 * min}, 5, 15 * min},
		{Ban{For: 15 * min, Growth: 2, Max: time.Hour}, 2, 30 * min},
		{Ban{For: 15 * min, Growth: 2, Max: time.Hour}, 3, time.Hour},
		{Ban{For: 15 * min, Growth: 2, Max: time.Hour}, 1000, time.Hour},
		{Ban{For: 15 * min, Growth: 2}, 100, DefaultBanMax},
		{Ban{For: 48 * time.Hour, Growth: 2}, 2, 48 * time.Hour},
		{Ban{For: min, Growth: 1.5, Max: time.Hour}, 3, 135 * time.Second},
	} {
		if got := tc.b.Length(tc.n); got != tc.want {
			t.Errorf("%+v.Length(%d) = %v, want %v", tc.b, tc.n, got, tc.want)
		}
	}
}

// TestBanValidation checks that every bad value of a ban or a concurrency
// limit is refused, in Go and in JSON, with an error wrapping
// ErrInvalidConfig that names the rule.
func TestBanValidation(t *testing.T) {
	ok := Ban{After: 3, Within: time.Minute, For: time.Minute}
	for _, tc := range []struct {
		name string
		ban  *Ban
		conc *Concurrency
	}{
		{"after 0", &Ban{After: 0, Within: time.Minute, For: time.Minute}, nil},
		{"after huge", &Ban{After: MaxBanAfter + 1, Within: time.Minute, For: time.Minute}, nil},
		{"no within", &Ban{After: 1, For: time.Minute}, nil},
		{"no for", &Ban{After: 1, Within: time.Minute}, nil},
		{"negative for", &Ban{After: 1, Within: time.Minute, For: -time.Minute}, nil},
		{"long for", &Ban{After: 1, Within: time.Minute, For: MaxBanDuration + 1}, nil},
		{"growth below 1", &Ban{After: 1, Within: time.Minute, For: time.Minute, Growth: 0.5}, nil},
		{"growth NaN", &Ban{After: 1, Within: time.Minute, For: time.Minute, Growth: nan()}, nil},
		{"max below for", &Ban{After: 1, Within: time.Minute, For: time.Hour, Max: time.Minute}, nil},
		{"limit 0", &ok, &Concurrency{}},
		{"limit huge", nil, &Concurrency{Limit: MaxConcurrency + 1}},
		{"status 500", nil, &Concurrency{Limit: 1, Status: 500}},
		{"negative retry", nil, &Concurrency{Limit: 1, RetryAfter: -time.Second}},
	} {
		r := &Rules{Rules: []Rule{{Name: "bad-rule", Limit: 1, Window: time.Second, Ban: tc.ban, Concurrency: tc.conc}}}
		err := r.Validate()
		if !errors.Is(err, shardlimit.ErrInvalidConfig) || !strings.Contains(err.Error(), `"bad-rule"`) {
			t.Errorf("%s: %v, want ErrInvalidConfig naming the rule", tc.name, err)
		}
	}
	for _, js := range []string{
		`"ban": {"within": "1m", "for": "1m"}`,
		`"ban": {"after": 1, "within": "soon", "for": "1m"}`,
		`"ban": {"after": 1, "within": "1m"}`,
		`"ban": {"after": 1, "within": "1m", "for": "1m", "max": "x"}`,
		`"ban": {"after": 1, "within": "1m", "for": "1m", "forever": true}`,
		`"ban": {"after": 0, "within": "1m", "for": "1m"}`,
		`"ban": {"after": 1, "within": "1m", "for": "1h", "max": "1m"}`,
		`"ban": {"after": 1, "within": "1m", "for": "1m", "growth": 0.5}`,
		`"concurrency": {"status": 503}`,
		`"concurrency": {"limit": 1, "retry_after": "1 s"}`,
		`"concurrency": {"limit": 1, "status": 404}`,
		`"concurrency": {"limit": 1, "burst": 2}`,
		`"shadow": true, "ban": {"after": 1, "within": "1m", "for": "1m"}`,
		`"shadow": true, "concurrency": {"limit": 1}`,
	} {
		_, err := ParseRules([]byte(`{"rules": [{"name": "bad-rule", "path": "/a", "limit": 1, "window": "1m", ` + js + `}]}`))
		named := strings.Contains(err.Error(), `"bad-rule"`)
		if !errors.Is(err, shardlimit.ErrInvalidConfig) || !named {
			t.Errorf("%s: %v, want ErrInvalidConfig naming the rule", js, err)
		}
	}
	for _, o := range []Options{
		{MaxPolicyKeys: -1}, {MaxPolicyKeys: MaxPolicyKeysLimit + 1}, {BanSyncInterval: -1}, {BanSyncInterval: time.Hour},
	} {
		o.Rules = &Rules{Rules: []Rule{{Name: "a", Limit: 1, Window: time.Second}}}
		if err := o.Validate(); !errors.Is(err, shardlimit.ErrInvalidConfig) {
			t.Errorf("%+v: %v, want ErrInvalidConfig", o, err)
		}
	}
}

// nan returns a NaN that the compiler does not fold.
func nan() float64 {
	z := 0.0
	return z / z
}
