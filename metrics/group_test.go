package metrics_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/httpmw"
	"github.com/shardlimit/shardlimit/internal/mwtest"
	"github.com/shardlimit/shardlimit/metrics"
)

// The series counts the package doc and the README state.
const (
	perLimiter     = 8  // a Limiter source in memory
	perRule        = 14 // a middleware rule in memory: perLimiter and six of errors
	sharedExtra    = 24 // what a sync.Shared limiter adds
	exactExtra     = 22 // what a sync.Exact limiter adds
	exactOnly      = 15 // of which families a sync.Shared limiter has not
	perGroup       = 15 // a group of rules in memory of one algorithm, limit and window
	maxGroupSeries = perGroup + 11 + sharedExtra + exactOnly
)

// scrape writes sources as text, has promtool check it, and returns its
// samples by series (name and labels as written) and their count.
func scrape(t *testing.T, sources ...metrics.Source) (map[string]float64, int) {
	t.Helper()
	var buf bytes.Buffer
	if err := metrics.WriteText(&buf, sources...); err != nil {
		t.Fatal(err)
	}
	promtoolCheck(t, buf.Bytes())
	out := map[string]float64{}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out, len(out)
}

// manyRules returns a middleware of n rules on paths /r0, /r1...; with
// mixed, the rules cycle through the four algorithms and differ in limit.
func manyRules(t *testing.T, n int, mixed bool) *httpmw.Middleware {
	t.Helper()
	algs := []string{"fixed_window", "sliding_log", "sliding_counter", "gcra"}
	var rules []string
	for i := range n {
		alg, limit := algs[0], 5
		if mixed {
			alg, limit = algs[i%len(algs)], 5+i
		}
		rules = append(rules, fmt.Sprintf(`{"name": "rule-%d", "path": "/r%d", "algorithm": %q, "limit": %d, "window": "1m"}`, i, i, alg, limit))
	}
	rs := mwtest.MustRules(t, `{"rules": [`+strings.Join(rules, ",")+`]}`)
	mw, err := httpmw.New(httpmw.Config{Options: httplimit.Options{Rules: rs, Clock: shardlimit.NewManualClock(mwtest.T0)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mw.Close() })
	return mw
}

// TestSeriesCount counts the series of middlewares of 1, 10 and 100 rules,
// per rule and grouped, against the counts the package doc and the README
// state, and checks that both state them.
func TestSeriesCount(t *testing.T) {
	for _, n := range []int{1, 10, 100} {
		mw := manyRules(t, n, false)
		if _, got := scrape(t, metrics.Middleware(mw)); got != perRule*n {
			t.Errorf("%d rules: %d series, want %d*%d", n, got, perRule, n)
		}
		if _, got := scrape(t, metrics.Middleware(mw, metrics.WithGroup(metrics.AllRules))); got != perGroup {
			t.Errorf("%d rules, AllRules: %d series, want %d", n, got, perGroup)
		}
		if _, got := scrape(t, metrics.Middleware(mw, metrics.WithGroup(nil))); got != perRule*n {
			t.Errorf("%d rules, WithGroup(nil): %d series, want %d*%d", n, got, perRule, n)
		}
		mixed := manyRules(t, n, true)
		// One info series per algorithm; the limits differ past one rule.
		want := perGroup + min(n, 4) - 1
		if n > 1 {
			want--
		}
		if _, got := scrape(t, metrics.Middleware(mixed, metrics.WithGroup(metrics.AllRules))); got != want {
			t.Errorf("%d mixed rules, AllRules: %d series, want %d", n, got, want)
		}
	}
	lim, err := shardlimit.New(shardlimit.Config{Algorithm: shardlimit.GCRA, Limit: 1, Window: time.Second, JanitorInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	if _, got := scrape(t, metrics.Limiter("x", lim)); got != perLimiter {
		t.Errorf("a limiter: %d series, want %d", got, perLimiter)
	}
	checkStatedCounts(t)
}

// checkStatedCounts checks that the package doc and the README state the
// counts the tests count.
func checkStatedCounts(t *testing.T) {
	t.Helper()
	for _, file := range []string{"doc.go", "../README.md"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(strings.Fields(strings.NewReplacer("//", " ").Replace(string(b))), " ")
		for _, s := range []string{
			fmt.Sprintf("emits %d series", perLimiter),
			fmt.Sprintf("%d series per rule", perRule),
			fmt.Sprintf("%d for a sync.Shared", perRule+sharedExtra),
			fmt.Sprintf("%d for a sync.Exact", perRule+exactExtra),
			fmt.Sprintf("%d*R", perRule),
			fmt.Sprintf("%d*S + %d*E", perRule+sharedExtra, perRule+exactExtra),
			fmt.Sprintf("adds %d", sharedExtra),
			fmt.Sprintf("%d series for rules in memory", perGroup),
			fmt.Sprintf("plus %d if any", sharedExtra),
			fmt.Sprintf("%d if any is a sync.Exact", exactExtra),
			fmt.Sprintf("only %d of them if it has a sync.Shared", exactOnly),
			fmt.Sprintf("at most %d series per group", maxGroupSeries),
		} {
			if !strings.Contains(text, s) {
				t.Errorf("%s does not say %q", file, s)
			}
		}
	}
}

// TestGroupSums sends known requests to two rules and reads them grouped:
// as one group (AllRules), their decisions, keys and rules add up, the
// window they share is kept and the limit they differ in is not; by tier,
// each stays apart.
func TestGroupSums(t *testing.T) {
	_, mw, _ := scenario(t) // anon-bar: 2 allowed, 2 denied; client-1-foo: 3 allowed, 2 denied
	got, n := scrape(t, metrics.Middleware(mw, metrics.WithGroup(metrics.AllRules)))
	want := map[string]float64{
		`shardlimit_decisions_total{limiter="all",outcome="allowed"}`:                   5,
		`shardlimit_decisions_total{limiter="all",outcome="denied"}`:                    4,
		`shardlimit_keys{limiter="all"}`:                                                2,
		`shardlimit_group_rules{limiter="all"}`:                                         2,
		`shardlimit_window_seconds{limiter="all"}`:                                      60,
		`shardlimit_errors_total{kind="no_identity",limiter="all"}`:                     0,
		`shardlimit_limiter_info{algorithm="fixed_window",limiter="all",store="local"}`: 1,
		`shardlimit_limiter_info{algorithm="sliding_log",limiter="all",store="local"}`:  1,
	}
	for series, v := range want {
		if got[series] != v {
			t.Errorf("%s = %v, want %v", series, got[series], v)
		}
	}
	if _, ok := got[`shardlimit_limit{limiter="all"}`]; ok || n != perGroup {
		t.Errorf("%d series (want %d), limit %v (want none: the rules differ)", n, perGroup, got)
	}
	got, _ = scrape(t, metrics.Middleware(mw, metrics.WithGroup(metrics.ByTier)))
	for series, v := range map[string]float64{
		`shardlimit_decisions_total{limiter="default",outcome="allowed"}`:      2,
		`shardlimit_decisions_total{limiter="tier:client-1",outcome="denied"}`: 2,
		`shardlimit_limit{limiter="tier:client-1"}`:                            3,
	} {
		if got[series] != v {
			t.Errorf("ByTier: %s = %v, want %v", series, got[series], v)
		}
	}
	// "" keeps a rule apart, under its own name.
	apart := func(r httplimit.RuleStats) string {
		if r.Name == "anon-bar" {
			return ""
		}
		return "rest"
	}
	got, _ = scrape(t, metrics.Middleware(mw, metrics.WithGroup(apart)))
	if got[`shardlimit_decisions_total{limiter="anon-bar",outcome="denied"}`] != 2 || got[`shardlimit_group_rules{limiter="rest"}`] != 1 {
		t.Errorf("a rule kept apart: %v", got)
	}
}

// TestGroupReload reloads a middleware's rules between scrapes: a rule
// removed leaves its counts with its group, one that comes back within its
// window (with its limiter and counts) is not counted twice, and the
// group's counters never go down.
func TestGroupReload(t *testing.T) {
	clock := shardlimit.NewManualClock(mwtest.T0)
	both := mwtest.MustRules(t, `{"rules": [
		{"name": "a", "path": "/a", "limit": 2, "window": "1m"},
		{"name": "b", "path": "/b", "limit": 2, "window": "1m"}]}`)
	onlyA := mwtest.MustRules(t, `{"rules": [{"name": "a", "path": "/a", "limit": 2, "window": "1m"}]}`)
	mw, err := httpmw.New(httpmw.Config{Options: httplimit.Options{Rules: both, Clock: clock}})
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Close()
	srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})))
	defer srv.Close()
	c := mwtest.NewClient(t, srv.URL, 1)
	src := metrics.Middleware(mw, metrics.WithGroup(metrics.AllRules))
	check := func(step string, allowed, denied float64) {
		t.Helper()
		got, _ := scrape(t, src)
		if a, d := got[`shardlimit_decisions_total{limiter="all",outcome="allowed"}`], got[`shardlimit_decisions_total{limiter="all",outcome="denied"}`]; a != allowed || d != denied {
			t.Errorf("%s: allowed %v, denied %v; want %v, %v", step, a, d, allowed, denied)
		}
	}
	for _, path := range []string{"/a", "/b", "/b", "/b"} {
		c.Get(path)
	}
	check("a and b", 3, 1)
	if err := mw.Reload(onlyA); err != nil {
		t.Fatal(err)
	}
	check("b removed", 3, 1)
	c.Get("/a")
	check("b removed, a counts on", 4, 1)
	if err := mw.Reload(both); err != nil {
		t.Fatal(err)
	}
	check("b back with its counts", 4, 1)
	c.Get("/b")
	check("b back, counting", 4, 2)
}

// fakeMiddleware is an HTTPMiddleware whose rules the test sets.
type fakeMiddleware struct{ rules []httplimit.RuleStats }

func (f *fakeMiddleware) RuleStats() []httplimit.RuleStats { return f.rules }

// TestGroupCarries follows one group's allowed counter through member
// changes that a real reload makes hard to arrange: a limiter replaced
// (its counts start again), a rule moved to another group, a member whose
// count goes down.
func TestGroupCarries(t *testing.T) {
	newLim := func() shardlimit.Limiter {
		l, err := shardlimit.New(shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 9, Window: time.Minute, JanitorInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	a, b, a2 := newLim(), newLim(), newLim()
	rule := func(name string, l shardlimit.Limiter, allowed uint64) httplimit.RuleStats {
		return httplimit.RuleStats{Name: name, Limiter: l, Stats: shardlimit.Stats{Allowed: allowed}}
	}
	group := func(r httplimit.RuleStats) string { return strings.TrimRight(r.Name, "0123456789") }
	fake := &fakeMiddleware{}
	src := metrics.Middleware(fake, metrics.WithGroup(group))
	for _, step := range []struct {
		name  string
		rules []httplimit.RuleStats
		want  map[string]float64 // allowed by group
	}{
		{"x1 and x2", []httplimit.RuleStats{rule("x1", a, 5), rule("x2", b, 3)}, map[string]float64{"x": 8}},
		{"x1's limiter replaced", []httplimit.RuleStats{rule("x1", a2, 1), rule("x2", b, 3)}, map[string]float64{"x": 9}},
		{"x2 renamed y2: moved", []httplimit.RuleStats{rule("x1", a2, 1), rule("y2", b, 4)}, map[string]float64{"x": 9, "y": 4}},
		{"x1 goes down", []httplimit.RuleStats{rule("x1", a2, 0), rule("y2", b, 4)}, map[string]float64{"x": 9, "y": 4}},
		{"x1 counts again", []httplimit.RuleStats{rule("x1", a2, 2), rule("y2", b, 4)}, map[string]float64{"x": 11, "y": 4}},
		{"y emptied", []httplimit.RuleStats{rule("x1", a2, 2)}, map[string]float64{"x": 11}},
	} {
		fake.rules = step.rules
		got, _ := scrape(t, src)
		for g, v := range step.want {
			if s := fmt.Sprintf(`shardlimit_decisions_total{limiter=%q,outcome="allowed"}`, g); got[s] != v {
				t.Errorf("%s: %s = %v, want %v", step.name, s, got[s], v)
			}
		}
		if _, ok := got[`shardlimit_group_rules{limiter="y"}`]; ok != (step.want["y"] != 0) {
			t.Errorf("%s: group y reported: %v", step.name, ok)
		}
	}
}

// TestGroupConcurrentScrapes scrapes one grouped source from several
// goroutines while requests are decided: no scrape may see a member's
// count go down (which would carry it twice), so once the requests are
// done the group's decisions are exactly those sent.
func TestGroupConcurrentScrapes(t *testing.T) {
	const rules, requests, scrapers = 10, 200, 4
	mw := manyRules(t, rules, false)
	srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})))
	defer srv.Close()
	src := metrics.Middleware(mw, metrics.WithGroup(metrics.AllRules))
	done := make(chan struct{})
	var wg gosync.WaitGroup
	for range scrapers {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if err := metrics.WriteText(io.Discard, src); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	c := mwtest.NewClient(t, srv.URL, 1)
	for i := range requests {
		c.Get(fmt.Sprintf("/r%d", i%rules))
	}
	close(done)
	wg.Wait()
	got, _ := scrape(t, src)
	a, d := got[`shardlimit_decisions_total{limiter="all",outcome="allowed"}`], got[`shardlimit_decisions_total{limiter="all",outcome="denied"}`]
	if a+d != requests || a != 5*rules {
		t.Errorf("allowed %v + denied %v, want %d allowed of %d", a, d, 5*rules, requests)
	}
}
