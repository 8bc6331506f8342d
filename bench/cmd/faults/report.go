package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	shardsync "github.com/shardlimit/shardlimit/sync"
)

// report writes the markdown report of every run.
func report(w io.Writer, p params, table []fault, runs [][]*row, took time.Duration, startLoad string) {
	fmt.Fprintf(w, "# Store faults: %d nodes sharing one Redis\n\n", p.nodes)
	fmt.Fprintf(w, "%s; commit %s; %s, %d cores, load average %s at the start, %s at the end; total runtime %v.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), commit(), runtime.Version(), runtime.NumCPU(), startLoad, loadavg(),
		took.Round(time.Second))
	fmt.Fprintf(w, "L = %d per W = %v, %d nodes per mode, each offered %g requests/s for one key (%.1fx L per window in all); "+
		"fallback L/N = %d per node. Eviction flood %v, restart %v after the kill, replies held %v; "+
		"the fault starts W/4 into a window after 2-3 windows of traffic, which goes on %d windows after it ends. "+
		"%d run(s); a range gives the smallest and largest over the runs. go-redis logged %d lines (not shown).\n\n",
		p.limit, p.window, p.nodes, p.rate, p.rate*float64(p.nodes)*p.window.Seconds()/float64(p.limit),
		p.fallbackLimit(), p.flood, p.down, p.stall, p.recover, p.runs, redisLog.lines.Load())
	fmt.Fprintf(w, "A fault *affects* a mode from its injection until the store is whole again (flood stopped and maxmemory "+
		"lifted, the restarted server answering, the proxy forwarding) or, if later, until the last of the mode's nodes "+
		"reported Healthy again (OnStateChange): a limiter that noticed the fault late still decides by its policy.\n\n")
	fmt.Fprintf(w, "## Most admitted in one window the fault affects\n\n")
	fmt.Fprintf(w, "Summed over the nodes; fixed window: the aligned windows [kW, (k+1)W) of Unix time; the others: any [s, s+W). "+
		"✓ within the bound the sync docs state today (\"about the limit\", ≈L, judged at 1.1 L), ✗ above it in at least one run.\n\n")
	header(w, "fault")
	for i, f := range table {
		fmt.Fprintf(w, "| %s |", f.name)
		for j, m := range modes {
			_, pass, _ := m.bound(p)
			lo, hi := minMax(runs, i, j, func(c cell) int { return c.faultMax })
			mark := "✓"
			if hi > pass {
				mark = "✗"
			}
			fmt.Fprintf(w, " %s (%s) %s |", rangeOf(lo, hi), rangeX(lo, hi, p.limit), mark)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "| bound the docs state |")
	for _, m := range modes {
		b, pass, doc := m.bound(p)
		if pass != b {
			fmt.Fprintf(w, " %s = %d, pass ≤ %d |", doc, b, pass)
		} else {
			fmt.Fprintf(w, " %s = %d |", doc, b)
		}
	}
	fmt.Fprintf(w, "\n| windows clear of the fault (before it, or W after it) |")
	for j := range modes {
		lo, hi := 1<<30, 0
		for _, rows := range runs {
			for i := range rows {
				lo, hi = min(lo, rows[i].cells[j].healthy), max(hi, rows[i].cells[j].healthy)
			}
		}
		fmt.Fprintf(w, " %s (%s) |", rangeOf(lo, hi), rangeX(lo, hi, p.limit))
	}
	fmt.Fprintf(w, "\n\nThe last row is not judged: Exact holds L per window (a GCRA's [s, s+W) may also hold what its bucket "+
		"had saved; a decision is counted at the harness's instant, Redis decides at its TIME), Shared L + (N-1)·R·D with D = 2·(flush gap + round trip) (Shared's doc; the flush gaps "+
		"are in the details).\n\n")
	healthTable(w, p, table, runs)
	details(w, p, runs)
}

// header writes a table header with one column per mode.
func header(w io.Writer, first string) {
	fmt.Fprintf(w, "| %s |", first)
	for _, m := range modes {
		fmt.Fprintf(w, " %s |", m.name)
	}
	fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("---|", len(modes)))
}

// healthTable writes what the limiters said of their health during the
// fault.
func healthTable(w io.Writer, p params, table []fault, runs [][]*row) {
	fmt.Fprintf(w, "## Health during the fault\n\n")
	fmt.Fprintf(w, "While the fault affects the mode, all nodes: **policy**, the share of the decisions the failure policy made "+
		"(Exact: ExactStats.PolicyDecisions over Stats' decisions; Shared reports no such count, n/a); **degraded**, the share of "+
		"decisions before which State() said Degraded; then Shared's failed flushes over flushes and units whose reply was lost "+
		"(UnknownUnits), and the other nodes' units a node had read that its counters later lacked (LostUnits: the store lost them; "+
		"counted at every read until healed); for Exact, its own units that a reply counted fewer of than it had in the store "+
		"(ExactStats.LostUnits: proof of a loss before INFO shows it). Ranges over the runs.\n\n")
	header(w, "fault")
	for i, f := range table {
		fmt.Fprintf(w, "| %s |", f.name)
		for j, m := range modes {
			fmt.Fprintf(w, " %s |", healthCell(m, runs, i, j))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}

// healthCell summarizes mode j's health in row i over the runs.
func healthCell(m mode, runs [][]*row, i, j int) string {
	var pol, deg []float64
	var failed, flushes, unknown, lost []int
	for _, rows := range runs {
		c := rows[i].cells[j]
		d := delta(c)
		if c.inFault > 0 {
			deg = append(deg, float64(c.degraded)/float64(c.inFault))
		}
		if d.decisions > 0 {
			pol = append(pol, float64(d.policy)/float64(d.decisions))
		}
		failed, flushes, unknown = append(failed, int(d.failed)), append(flushes, int(d.flushes)), append(unknown, int(d.unknown))
		lost = append(lost, int(d.lost))
	}
	var b strings.Builder
	if m.exact {
		fmt.Fprintf(&b, "policy %s", pctRange(pol))
	} else {
		b.WriteString("policy n/a")
	}
	fmt.Fprintf(&b, ", degraded %s", pctRange(deg))
	if m.exact {
		fmt.Fprintf(&b, ", lost units %s", intRange(lost))
	} else {
		fmt.Fprintf(&b, ", failed flushes %s/%s, unknown units %s, lost units %s", intRange(failed), intRange(flushes), intRange(unknown), intRange(lost))
	}
	return b.String()
}

// delta sums the nodes' snapshots after the fault minus before.
func delta(c cell) snapshot {
	var d snapshot
	for k := range c.before {
		a, b := c.after[k], c.before[k]
		d.decisions += a.decisions - b.decisions
		d.policy += a.policy - b.policy
		d.calls += a.calls - b.calls
		d.errors += a.errors - b.errors
		d.timeouts += a.timeouts - b.timeouts
		d.flushes += a.flushes - b.flushes
		d.failed += a.failed - b.failed
		d.unknown += a.unknown - b.unknown
		d.lost += a.lost - b.lost
		d.dropped += a.dropped - b.dropped
		d.retried += a.retried - b.retried
		d.trips += a.trips - b.trips
		d.evicted += a.evicted - b.evicted
	}
	return d
}

// details writes every run's rows in full.
func details(w io.Writer, p params, runs [][]*row) {
	fmt.Fprintf(w, "## Runs in detail\n\n")
	fmt.Fprintf(w, "Times are relative to the fault's start. *worst window*: its start and count; *affected*: until when the "+
		"fault affected the mode; *clear*: the most in one window clear of that (after the first W of traffic, and before the fault or from W after the mode's affected end); *in fault*: decisions "+
		"while affected, and of them those before which State() said Degraded; state changes "+
		"are OnStateChange calls per node (D degraded, H healthy) with their error, to the end of the run.\n\n")
	for k, rows := range runs {
		for _, r := range rows {
			fmt.Fprintf(w, "### Run %d, %s\n\n", k+1, r.fault.name)
			via := ""
			if r.throughProxy {
				via = " through the proxy"
			}
			fmt.Fprintf(w, "Redis %s%s; traffic from %v to %v; fault from 0 to %v: %s.",
				r.redisAddr, via, rel(r.start, r.fs), rel(r.end, r.fs), rel(r.fe, r.fs), r.note)
			if r.injectErr != nil {
				fmt.Fprintf(w, " Injection error: %v.", r.injectErr)
			}
			fmt.Fprintf(w, "\n\n| mode | worst window | affected | clear | offered | in fault (degraded) | stats over the fault | state changes |\n|---|---|---|---|---|---|---|---|\n")
			for _, c := range r.cells {
				fmt.Fprintf(w, "| %s | %d (%.2fx) at %v | to %v | %d | %d | %d (%d) | %s | %s |\n", c.mode.id, c.faultMax,
					float64(c.faultMax)/float64(p.limit), rel(c.faultAt, r.fs), rel(c.spanEnd, r.fs), c.healthy, c.offered,
					c.inFault, c.degraded, statsCell(c, r.fs), changesCell(c, r.fs))
			}
			fmt.Fprintln(w)
		}
	}
}

// statsCell spells the stats deltas of c over the fault.
func statsCell(c cell, fs time.Time) string {
	d := delta(c)
	var s string
	if c.mode.exact {
		s = fmt.Sprintf("decisions %d, policy %d, calls %d, errors %d, timeouts %d, lost %d, trips %d",
			d.decisions, d.policy, d.calls, d.errors, d.timeouts, d.lost, d.trips)
	} else {
		var gap time.Duration
		for _, a := range c.final {
			gap = max(gap, a.maxGap)
		}
		s = fmt.Sprintf("decisions %d, flushes %d, failed %d, unknown %d, retried %d, dropped %d, lost %d, trips %d; "+
			"MaxFlushGap over the run %v", d.decisions, d.flushes, d.failed, d.unknown, d.retried, d.dropped, d.lost, d.trips,
			gap.Round(time.Millisecond))
	}
	if c.mode.exact {
		var all uint64
		for k, a := range c.final {
			all += a.policy - c.after[k].policy
		}
		for _, b := range c.before {
			all += b.policy
		}
		s += fmt.Sprintf("; policy decisions outside the fault %d", all)
	}
	s += fmt.Sprintf("; slowest decision %v at %v", c.slowest.Round(time.Millisecond), rel(c.slowestAt, fs))
	if d.evicted > 0 {
		s += fmt.Sprintf(", evicted seen %d", d.evicted)
	}
	if c.errs > 0 {
		s += fmt.Sprintf(", %d results with Err", c.errs)
	}
	return s
}

// changesCell spells the state changes of c's nodes.
func changesCell(c cell, fs time.Time) string {
	var parts []string
	for i, chs := range c.changes {
		var b strings.Builder
		fmt.Fprintf(&b, "n%d:", i)
		if len(chs) == 0 {
			b.WriteString(" none")
		}
		for _, ch := range chs {
			tag := "H"
			if ch.to == shardsync.Degraded {
				tag = "D"
			}
			fmt.Fprintf(&b, " %s@%v", tag, rel(ch.at, fs))
			if ch.err != "" {
				fmt.Fprintf(&b, " (%s)", shorten(ch.err, 60))
			}
		}
		parts = append(parts, b.String())
	}
	return strings.Join(parts, "; ")
}

// shorten cuts s to n bytes and escapes the table's separators.
func shorten(s string, n int) string {
	if len(s) > n {
		s = s[:n] + "…"
	}
	return strings.NewReplacer("|", "\\|", "\n", " ").Replace(s)
}

// rel spells t relative to base, to the tenth of a second.
func rel(t, base time.Time) string {
	d := t.Sub(base).Round(100 * time.Millisecond)
	if d >= 0 {
		return "+" + d.String()
	}
	return d.String()
}

func minMax(runs [][]*row, i, j int, f func(cell) int) (int, int) {
	lo, hi := 1<<30, -1
	for _, rows := range runs {
		v := f(rows[i].cells[j])
		lo, hi = min(lo, v), max(hi, v)
	}
	return lo, hi
}

func rangeOf(lo, hi int) string {
	if lo == hi {
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%d-%d", lo, hi)
}

func rangeX(lo, hi, limit int) string {
	l, h := float64(lo)/float64(limit), float64(hi)/float64(limit)
	if lo == hi {
		return fmt.Sprintf("%.2fx", l)
	}
	return fmt.Sprintf("%.2f-%.2fx", l, h)
}

func pctRange(v []float64) string {
	if len(v) == 0 {
		return "n/a"
	}
	lo, hi := v[0], v[0]
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	if fmt.Sprintf("%.0f", lo*100) == fmt.Sprintf("%.0f", hi*100) {
		return fmt.Sprintf("%.0f%%", lo*100)
	}
	return fmt.Sprintf("%.0f-%.0f%%", lo*100, hi*100)
}

func intRange(v []int) string {
	lo, hi := v[0], v[0]
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	return rangeOf(lo, hi)
}

// commit returns the repository's HEAD, marked if the tree has changes.
func commit() string {
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		c += " (with uncommitted changes)"
	}
	return c
}

// loadavg returns the 1, 5 and 15 minute load averages, or "unknown".
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
