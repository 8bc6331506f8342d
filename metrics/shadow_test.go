package metrics_test

import (
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/metrics"
)

// TestShadowWouldDeny checks that a shadow rule's denials are reported as
// outcome would_deny, an enforced rule's beside it as denied.
func TestShadowWouldDeny(t *testing.T) {
	l, err := shardlimit.New(shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 9, Window: time.Minute, JanitorInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	fake := &fakeMiddleware{rules: []httplimit.RuleStats{
		{Name: "foo", Limiter: l, Stats: shardlimit.Stats{Allowed: 5, Denied: 1}},
		{Name: "foo-try", Limiter: l, Shadow: true, Stats: shardlimit.Stats{Allowed: 2, Denied: 4}},
	}}
	got := map[[2]string]float64{}
	metrics.Collect(func(s metrics.Sample) {
		if s.Family.Name == "shardlimit_decisions_total" {
			got[[2]string{s.Labels[0], s.Labels[1]}] = s.Value
		}
	}, metrics.Middleware(fake))
	want := map[[2]string]float64{
		{"foo", "allowed"}: 5, {"foo", "denied"}: 1,
		{"foo-try", "allowed"}: 2, {"foo-try", "would_deny"}: 4,
	}
	if len(got) != len(want) {
		t.Errorf("decisions %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("decisions%v = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}
