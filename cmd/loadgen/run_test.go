package main

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit/httplimit"
)

// checkSent fails unless s sent about rate x d requests (within 10%, at
// least 2), and got an answer for each.
func checkSent(t *testing.T, s StreamReport, d time.Duration) {
	t.Helper()
	want := s.Rate * d.Seconds()
	if tol := max(2, want/10); math.Abs(float64(s.Sent)-want) > tol {
		t.Errorf("%s %s: sent %d, want %.0f ± %.0f (late %d, missed %d)", s.Client, s.Route, s.Sent, want, tol, s.Late, s.Missed)
	}
	if got := s.Admitted + s.Denied + s.Other + s.Errors; got != s.Sent {
		t.Errorf("%s %s: %d answers and errors for %d sent", s.Client, s.Route, got, s.Sent)
	}
	if s.Errors != 0 || s.Other != 0 {
		t.Errorf("%s %s: %d errors (first %q), %d other answers %v", s.Client, s.Route, s.Errors, s.FirstError, s.Other, s.Statuses)
	}
}

// shortRules limit every client per 1 s window: /slog with the sliding
// log, /fixed with the fixed window; /free has no rule.
const shortRules = `{"rules": [
	{"name": "slog", "path": "/slog", "algorithm": "sliding_log", "limit": 5, "window": "1s"},
	{"name": "fixed", "path": "/fixed", "algorithm": "fixed_window", "limit": 8, "window": "1s"}
]}`

// TestLimitsHold drives 1 s limits for 2.5 s: the sliding log never admits
// more than its limit in any window, the fixed window never more in one
// aligned window, clients above their limit are denied, the one below is
// not, and the progress lines come once a second.
func TestLimitsHold(t *testing.T) {
	t.Parallel()
	url := server{rules: shortRules}.start(t)
	const d = 2500 * time.Millisecond
	cfg := testConfig(url, "a:/slog=20/s,a:/fixed=20/s,b:/slog=3/s,anon:/free=20/s", d)
	var progress syncBuffer
	cfg.Progress = &progress
	r := mustRun(t, context.Background(), cfg)
	var text strings.Builder
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", text.String())

	for _, s := range r.Streams {
		checkSent(t, s, d)
	}
	if r.Interrupted || r.Total.Missed != 0 {
		t.Errorf("interrupted %v, missed %d", r.Interrupted, r.Total.Missed)
	}

	slog := stream(t, r, "a", "/slog")
	if slog.Limit != 5 || slog.WindowMs != 1000 || slog.WindowFrom != fromWindowMs || slog.Strategy != "sliding_log" {
		t.Errorf("a /slog: limit %d, window %d ms from %s, strategy %q; want 5, 1000 from %s, sliding_log",
			slog.Limit, slog.WindowMs, slog.WindowFrom, slog.Strategy, fromWindowMs)
	}
	// Held exactly at the limit: 5 admitted at once, then none for a
	// window, never 6 in any window.
	if slog.MaxSliding.Admitted != 5 || slog.MaxFixed.Admitted > 5 || slog.MaxSliding.OfLimit != 1 {
		t.Errorf("a /slog: max sliding %+v, max fixed %+v; want 5 (1.00x) and at most 5", *slog.MaxSliding, *slog.MaxFixed)
	}
	if slog.Denied == 0 || slog.Admitted > 15 {
		t.Errorf("a /slog: %d admitted, %d denied; want at most 15 (3 windows) and some denied", slog.Admitted, slog.Denied)
	}

	fixed := stream(t, r, "a", "/fixed")
	if fixed.Limit != 8 || fixed.Strategy != "fixed_window" {
		t.Errorf("a /fixed: limit %d, strategy %q", fixed.Limit, fixed.Strategy)
	}
	// 2.5 s touch at most 4 aligned windows; a sliding interval at most
	// two (the boundary burst).
	if fixed.MaxFixed.Admitted > 8 || fixed.MaxSliding.Admitted > 16 || fixed.Admitted > 32 || fixed.Denied == 0 {
		t.Errorf("a /fixed: max fixed %d, max sliding %d, admitted %d, denied %d; want <= 8, <= 16, <= 32, > 0",
			fixed.MaxFixed.Admitted, fixed.MaxSliding.Admitted, fixed.Admitted, fixed.Denied)
	}

	under := stream(t, r, "b", "/slog")
	// 3/s on schedule puts at most 4 sends in any second; sends that left
	// late (the process was not scheduled) may bunch, up to the limit.
	maxUnder := int64(4)
	if under.Late > 0 {
		maxUnder = under.Limit
	}
	if under.Denied != 0 || under.Admitted != under.Sent || under.MaxSliding.Admitted > maxUnder {
		t.Errorf("b /slog at 3/s under 5/s: %d sent, %d admitted, %d denied, max sliding %d", under.Sent, under.Admitted, under.Denied, under.MaxSliding.Admitted)
	}

	free := stream(t, r, "anon", "/free")
	if free.Limit != 0 || free.MaxFixed != nil || free.Admitted != free.Sent || free.Latency.N != int(free.Sent) {
		t.Errorf("anon /free (no rule): limit %d, max fixed %v, %d of %d admitted, %d latencies", free.Limit, free.MaxFixed, free.Admitted, free.Sent, free.Latency.N)
	}
	if free.Latency.P50 <= 0 || free.Latency.P50 > free.Latency.P90 || free.Latency.P99 > free.Latency.Max {
		t.Errorf("anon /free: latency %+v", free.Latency)
	}

	lines := strings.Split(strings.TrimSpace(progress.String()), "\n")
	if len(lines) < 2 || len(lines) > 3 || !strings.Contains(lines[0], "sent ") || !strings.Contains(lines[0], "429 ") {
		t.Errorf("progress: want 2 lines (one a second), got %d:\n%s", len(lines), progress.String())
	}
}

// TestSeedRules drives the demo's seed rules (cmd/shardlimit-demo/rules.json,
// minute windows) for 2 s: everyone asking above their limit is held at it.
func TestSeedRules(t *testing.T) {
	t.Parallel()
	rules, err := os.ReadFile("../shardlimit-demo/rules.json")
	if err != nil {
		t.Fatal(err)
	}
	url := server{rules: string(rules)}.start(t)
	const d = 2 * time.Second
	r := mustRun(t, context.Background(), testConfig(url, "client-1:/foo=20/s,client-1:/bar=10/s,client-2:/bar=2/s,anon:/foo=10/s,anon:/healthz=10/s", d))
	for _, s := range r.Streams {
		checkSent(t, s, d)
	}
	for _, c := range []struct {
		client, route string
		limit         int64
		alg           string
	}{
		{"client-1", "/foo", 10, "fixed_window"},
		{"client-1", "/bar", 5, "sliding_log"},
		{"client-2", "/bar", 10, "sliding_log"},
		{"anon", "/foo", 5, "fixed_window"},
	} {
		s := stream(t, r, c.client, c.route)
		if s.Limit != c.limit || s.WindowMs != 60000 || s.Strategy != c.alg {
			t.Errorf("%s %s: limit %d per %d ms, %s; want %d per 60000, %s", c.client, c.route, s.Limit, s.WindowMs, s.Strategy, c.limit, c.alg)
		}
		if s.MaxFixed.Admitted > c.limit || s.Admitted > 2*c.limit {
			t.Errorf("%s %s: max fixed window %d, admitted %d; limit %d", c.client, c.route, s.MaxFixed.Admitted, s.Admitted, c.limit)
		}
	}
	// A fresh sliding log of 5 a minute admits exactly 5 of 20.
	if s := stream(t, r, "client-1", "/bar"); s.Admitted != 5 || s.Denied != 15 || s.MaxSliding.Admitted != 5 {
		t.Errorf("client-1 /bar: %d admitted, %d denied, max sliding %d; want 5, 15, 5", s.Admitted, s.Denied, s.MaxSliding.Admitted)
	}
	for _, k := range [][2]string{{"client-1", "/foo"}, {"anon", "/foo"}} {
		if s := stream(t, r, k[0], k[1]); s.Denied == 0 {
			t.Errorf("%s %s: nothing denied at %v/s", k[0], k[1], s.Rate)
		}
	}
	if s := stream(t, r, "client-2", "/bar"); s.Denied != 0 || s.Admitted != 4 {
		t.Errorf("client-2 /bar (4 of 10 a minute): %d admitted, %d denied", s.Admitted, s.Denied)
	}
	if s := stream(t, r, "anon", "/healthz"); s.Limit != 0 || s.Admitted != s.Sent {
		t.Errorf("anon /healthz (unlimited): limit %d, %d of %d admitted", s.Limit, s.Admitted, s.Sent)
	}
}

// TestWindowSources checks where the window comes from when the server
// sends no X-RateLimit-Window-Ms: RateLimit-Policy w=, else -window.
func TestWindowSources(t *testing.T) {
	t.Parallel()
	const rules = `{"rules": [{"name": "x", "path": "/x", "algorithm": "sliding_log", "limit": 3, "window": "2s"}]}`
	for _, c := range []struct {
		name    string
		headers httplimit.HeaderConfig
		flag    time.Duration
		from    string
		ms      int64
	}{
		{"policy", httplimit.HeaderConfig{IETF: true}, 0, fromPolicy, 2000},
		{"flag", httplimit.HeaderConfig{}, 500 * time.Millisecond, fromFlag, 500},
		{"none", httplimit.HeaderConfig{}, 0, "", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url := server{rules: rules, headers: &c.headers}.start(t)
			cfg := testConfig(url, "a:/x=10/s", 600*time.Millisecond)
			cfg.Window = c.flag
			r := mustRun(t, context.Background(), cfg)
			s := stream(t, r, "a", "/x")
			if s.Limit != 3 || s.WindowFrom != c.from || s.WindowMs != c.ms || (s.MaxSliding == nil) != (c.ms == 0) {
				t.Errorf("limit %d, window %d ms from %q, max sliding %v; want 3, %d ms from %q", s.Limit, s.WindowMs, s.WindowFrom, s.MaxSliding, c.ms, c.from)
			}
			if s.MaxSliding != nil && c.from == fromPolicy && s.MaxSliding.Admitted != 3 {
				t.Errorf("max sliding %d, want 3 (the limit, in the stated 2 s window)", s.MaxSliding.Admitted)
			}
		})
	}
}

// TestSlowServer checks open-loop pacing against a server slower than the
// schedule: with 2 slots and 150 ms answers only about 13 of 40 sends a
// second can leave; they leave late, the rest are missed, and the run
// still ends on time.
func TestSlowServer(t *testing.T) {
	t.Parallel()
	url := server{rules: `{"limiting": "off"}`, delay: 150 * time.Millisecond}.start(t)
	cfg := testConfig(url, "a:/slow=40/s", time.Second)
	cfg.Concurrency = 2
	start := time.Now()
	r := mustRun(t, context.Background(), cfg)
	s := stream(t, r, "a", "/slow")
	if s.Planned != 40 || s.Sent+s.Missed != 40 || s.Missed < 15 || s.Late < 5 || s.MaxLagMs < 100 {
		t.Errorf("planned %d, sent %d, missed %d, late %d, max lag %.0f ms; want 40 = sent + missed, missed >= 15, late >= 5, lag >= 100 ms",
			s.Planned, s.Sent, s.Missed, s.Late, s.MaxLagMs)
	}
	if s.Admitted != s.Sent || s.Latency.P50 < 150 {
		t.Errorf("%d of %d admitted, p50 %.1f ms", s.Admitted, s.Sent, s.Latency.P50)
	}
	// The duration plus the answers in flight (150 ms each), with room for
	// a loaded machine; waiting for the 27 or so sends that never left
	// would take 40 x 150 ms / 2 = 3 s.
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("run took %v; want the duration plus one answer", el)
	}
	var text strings.Builder
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "behind schedule") {
		t.Errorf("report does not say it fell behind:\n%s", text.String())
	}
}

// TestInterrupt cancels a 10 s run after 400 ms: it returns at once with
// the report so far.
func TestInterrupt(t *testing.T) {
	t.Parallel()
	url := server{rules: shortRules}.start(t)
	ctx, cancel := context.WithCancel(context.Background())
	canceled := make(chan time.Time, 1)
	time.AfterFunc(400*time.Millisecond, func() { canceled <- time.Now(); cancel() })
	r := mustRun(t, ctx, testConfig(url, "a:/slog=20/s", 10*time.Second))
	at := <-canceled
	if el := time.Since(at); el > 2*time.Second {
		t.Errorf("interrupted run returned %v after the cancel", el)
	}
	s := stream(t, r, "a", "/slog")
	// The sends due before the cancel (about 8 when the timer is on time)
	// left or are counted missed (a pacer the machine kept waiting); none
	// left after it, bar the one due at that instant.
	due := int64(plannedSends(20, at.Sub(r.Started)))
	if !r.Interrupted || s.Sent == 0 || s.Sent > due+1 || s.Sent+s.Missed < due || s.Admitted != min(5, s.Sent) {
		t.Errorf("interrupted %v, sent %d and missed %d of %d due before the cancel, admitted %d; want true, about 8, 0, 5",
			r.Interrupted, s.Sent, s.Missed, due, s.Admitted)
	}
}

// TestCLI runs the command's flags end to end: JSON output and progress,
// the text report of an interrupted run, and the errors of bad flags.
func TestCLI(t *testing.T) {
	t.Parallel()
	url := server{rules: shortRules}.start(t)
	quick := &hooks{config: func(c *Config) {
		c.IdleConnTimeout = 50 * time.Millisecond
		c.ProgressEvery = 400 * time.Millisecond
	}}

	// A 1 s log would admit a 6th send that left 100 ms late; a minute's
	// admits exactly 5 of the 10 whatever the scheduling.
	minute := server{rules: `{"rules": [{"name": "slog", "path": "/slog", "algorithm": "sliding_log", "limit": 5, "window": "1m"}]}`}.start(t)
	var stdout, stderr syncBuffer
	err := run(context.Background(), []string{"-url", minute, "-duration", "1s", "-clients", "client-9:/slog=10/s", "-json"}, &stdout, &stderr, quick)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	var r Report
	if err := json.Unmarshal([]byte(stdout.String()), &r); err != nil {
		t.Fatalf("-json output: %v\n%s", err, stdout.String())
	}
	if len(r.Streams) != 1 || r.Streams[0].Client != "client-9" || r.Streams[0].Sent != 10 || r.Streams[0].Admitted != 5 ||
		r.Streams[0].Limit != 5 || r.Streams[0].MaxSliding == nil || r.Streams[0].MaxSliding.Admitted != 5 {
		t.Errorf("-json report: %+v", r)
	}
	// A line every 0.4 s until the last answer: two (0.4 s, 0.8 s), or one
	// more for each 0.4 s the run overran its second.
	if p, most := stderr.String(), int(r.ElapsedS/0.4); !strings.HasPrefix(p, "loadgen    0s  sent ") || !strings.Contains(p, "/10  2xx ") ||
		strings.Count(p, "\n") < 2 || strings.Count(p, "\n") > max(2, most) {
		t.Errorf("progress on stderr: want two lines (at 0.4 s and 0.8 s; at most %d in %.2f s), got %q", max(2, most), r.ElapsedS, p)
	}

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	var stdout2, stderr2 syncBuffer
	err = run(ctx, []string{"-url", url, "-clients", "client-8:/free=10/s", "-quiet"}, &stdout2, &stderr2, quick)
	if !errors.Is(err, errInterrupted) || !strings.Contains(stdout2.String(), "interrupted after") ||
		!strings.Contains(stdout2.String(), "client-8  /free") || stderr2.String() != "" {
		t.Errorf("interrupted run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout2.String(), stderr2.String())
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-duration", "11m"}, "-duration 11m0s: must be above 0 and at most 10m0s"},
		{[]string{"-duration", "0s"}, "-duration 0s"},
		{[]string{"-concurrency", "0"}, "must be above 0"},
		{[]string{"-concurrency", "20000"}, "-concurrency 20000"},
		{[]string{"-timeout", "2m"}, "-timeout 2m0s"},
		{[]string{"-clients", "client-1/foo"}, "want client:/route=rate"},
		{[]string{"-clients", "a:/x=1000/s", "-duration", "10m"}, "the plan has 600000 requests, above -max-requests 100000"},
		{[]string{"-url", "http://192.0.2.1:8080"}, "-allow-remote"},
		{[]string{"-url", "http://127.0.0.1:1"}, "cannot reach"},
		{[]string{"-header", "X Client"}, "-header"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"-nope"}, "flag provided but not defined"},
	} {
		var out, errOut syncBuffer
		args := append([]string{"-max-requests", "100000", "-quiet"}, c.args...)
		err := run(context.Background(), args, &out, &errOut, quick)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("run %q = %v, want %q", c.args, err, c.want)
		}
		if out.String() != "" {
			t.Errorf("run %q wrote a report: %s", c.args, out.String())
		}
	}
}
