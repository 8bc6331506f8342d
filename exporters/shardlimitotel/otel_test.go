package shardlimitotel_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/exporters/shardlimitotel"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/httpmw"
	"github.com/shardlimit/shardlimit/metrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Unix(1_734_480_000, 0)

// scenario returns a limiter "login" that allowed 3, denied 1 and refused
// 1 new key, and a net/http middleware served on loopback in dry run whose
// rule "anon-bar" allowed 2 requests and would have denied 2.
func scenario(t *testing.T) (shardlimit.Limiter, []metrics.Source) {
	t.Helper()
	clock := shardlimit.NewManualClock(t0)
	lim, err := shardlimit.New(shardlimit.Config{
		Algorithm: shardlimit.GCRA, Limit: 2, Window: time.Minute,
		Shards: 1, MaxKeys: 2, JanitorInterval: -1, Clock: clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	for _, key := range []string{"a", "a", "a", "b", "c"} {
		lim.AllowN(key, t0, 1)
	}
	rules, err := httplimit.ParseRules([]byte(`{"rules": [{"name": "anon-bar", "path": "/bar", "algorithm": "sliding_log", "limit": 2, "window": "1m"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpmw.New(httpmw.Config{Options: httplimit.Options{Rules: rules, Clock: clock, DryRun: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mw.Close() })
	srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })))
	t.Cleanup(srv.Close)
	for range 4 {
		res, err := srv.Client().Get(srv.URL + "/bar")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("dry run answered %d", res.StatusCode)
		}
	}
	return lim, []metrics.Source{metrics.Limiter("login", lim), metrics.Middleware(mw)}
}

// key names a data point by its instrument and attributes.
func key(name string, attrs attribute.Set) string {
	var kv []string
	for _, a := range attrs.ToSlice() {
		kv = append(kv, string(a.Key)+"="+a.Value.Emit())
	}
	return name + "{" + strings.Join(kv, ",") + "}"
}

// collect reads the manual reader and returns every data point by key,
// checking each instrument's kind, unit and description against its
// family.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]float64 {
	t.Helper()
	fams := map[string]*metrics.Family{}
	for _, f := range metrics.Families() {
		fams[shardlimitotel.Name(f)] = f
	}
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	points := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			f := fams[m.Name]
			if f == nil {
				t.Errorf("instrument %s: no such family", m.Name)
				continue
			}
			if m.Unit != f.Unit || m.Description != f.Help {
				t.Errorf("%s: unit %q, description %q; want %q, %q", m.Name, m.Unit, m.Description, f.Unit, f.Help)
			}
			var dps []metricdata.DataPoint[float64]
			switch d := m.Data.(type) {
			case metricdata.Sum[float64]:
				if f.Type != metrics.Counter || !d.IsMonotonic || d.Temporality != metricdata.CumulativeTemporality {
					t.Errorf("%s: a sum (monotonic %v, %v) for a %v", m.Name, d.IsMonotonic, d.Temporality, f.Type)
				}
				dps = d.DataPoints
			case metricdata.Gauge[float64]:
				if f.Type != metrics.Gauge {
					t.Errorf("%s: a gauge for a %v", m.Name, f.Type)
				}
				dps = d.DataPoints
			default:
				t.Errorf("%s: data %T", m.Name, m.Data)
			}
			for _, dp := range dps {
				points[key(m.Name, dp.Attributes)] = dp.Value
			}
		}
	}
	return points
}

// TestManualReader collects with the SDK's manual reader after a known
// sequence: every sample of package metrics is observed, with its value
// and attributes, and nothing else; some values are checked by hand.
func TestManualReader(t *testing.T) {
	lim, sources := scenario(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	reg, err := shardlimitotel.Register(mp.Meter("shardlimit-test"), sources...)
	if err != nil {
		t.Fatal(err)
	}
	got := collect(t, reader)

	want := map[string]float64{}
	metrics.Collect(func(s metrics.Sample) {
		var kv []attribute.KeyValue
		for i, v := range s.Labels {
			kv = append(kv, attribute.String(s.Family.Labels[i], v))
		}
		want[key(shardlimitotel.Name(s.Family), attribute.NewSet(kv...))] = s.Value
	}, sources...)
	if len(got) != len(want) {
		t.Errorf("%d data points, want %d", len(got), len(want))
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	for k, v := range map[string]float64{
		"shardlimit.decisions{limiter=login,outcome=allowed}":                         3,
		"shardlimit.decisions{limiter=login,outcome=denied}":                          1,
		"shardlimit.decisions{limiter=anon-bar,outcome=allowed}":                      2,
		"shardlimit.decisions{limiter=anon-bar,outcome=would_deny}":                   2,
		"shardlimit.keys_refused{limiter=login}":                                      1,
		"shardlimit.keys{limiter=login}":                                              2,
		"shardlimit.window{limiter=anon-bar}":                                         60,
		"shardlimit.limit{limiter=anon-bar}":                                          2,
		"shardlimit.limiter_info{algorithm=gcra,limiter=login,store=local}":           1,
		"shardlimit.errors{kind=bad_cost,limiter=anon-bar}":                           0,
		"shardlimit.limiter_info{algorithm=sliding_log,limiter=anon-bar,store=local}": 1,
	} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if t.Failed() {
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range got {
				if !yield(k) {
					return
				}
			}
		})
		t.Log(strings.Join(keys, "\n"))
	}

	// Observed afresh at each collection; nothing after Unregister.
	lim.AllowN("b", t0, 1)
	if v := collect(t, reader)["shardlimit.decisions{limiter=login,outcome=allowed}"]; v != 4 {
		t.Errorf("allowed after one more decision: %v, want 4", v)
	}
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	if after := collect(t, reader); len(after) != 0 {
		t.Errorf("%d data points after Unregister", len(after))
	}
}

// TestNames checks the instrument names: unique, and turned back into the
// Prometheus names by the usual suffixes.
func TestNames(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range metrics.Families() {
		n := shardlimitotel.Name(f)
		if seen[n] || !strings.HasPrefix(n, "shardlimit.") || strings.Count(n, ".") != 1 {
			t.Errorf("%s: name %q", f.Name, n)
		}
		seen[n] = true
		back := strings.Replace(n, ".", "_", 1)
		if f.Unit == "s" {
			back += "_seconds"
		}
		if f.Type == metrics.Counter {
			back += "_total"
		}
		if back != f.Name {
			t.Errorf("%s: %s goes back to %s", f.Name, n, back)
		}
	}
}
