package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Report is what a run did, per stream and in total. It is also the -json
// output.
type Report struct {
	// URL is the server.
	URL string `json:"url"`
	// Started is when the first request was scheduled.
	Started time.Time `json:"started"`
	// DurationS is the planned duration in seconds.
	DurationS float64 `json:"duration_s"`
	// ElapsedS is the time from the start to the last answer, in seconds.
	ElapsedS float64 `json:"elapsed_s"`
	// Interrupted says the run was stopped (Ctrl-C) before its duration.
	Interrupted bool `json:"interrupted"`
	// Concurrency is the cap on requests in flight.
	Concurrency int `json:"concurrency"`
	// Streams are in the order given.
	Streams []StreamReport `json:"streams"`
	// Total sums the streams' counts.
	Total Counts `json:"total"`
}

// Counts are request counts.
type Counts struct {
	// Planned sends are those scheduled within the full duration.
	Planned int64 `json:"planned"`
	// Sent requests left the generator.
	Sent int64 `json:"sent"`
	// Admitted requests were answered 2xx.
	Admitted int64 `json:"admitted"`
	// Denied requests were answered 429 Too Many Requests.
	Denied int64 `json:"denied"`
	// Other requests were answered with any other status.
	Other int64 `json:"other"`
	// Errors are requests without an answer (refused, reset, timeout).
	Errors int64 `json:"errors"`
	// Late sends left more than LateAfter after their scheduled time
	// because every -concurrency slot was busy (or the machine was).
	Late int64 `json:"late"`
	// Missed sends were due before the run stopped but never left, for
	// the same reason.
	Missed int64 `json:"missed"`
}

// add adds o to c.
func (c *Counts) add(o Counts) {
	c.Planned += o.Planned
	c.Sent += o.Sent
	c.Admitted += o.Admitted
	c.Denied += o.Denied
	c.Other += o.Other
	c.Errors += o.Errors
	c.Late += o.Late
	c.Missed += o.Missed
}

// StreamReport is one stream's outcome.
//
// The window counts use the window the server states (X-RateLimit-Window-Ms,
// else RateLimit-Policy w=, else -window). An admitted request counts in a
// window only if it was both sent and answered inside it: the server
// decided somewhere in between, so the counts never blame the server for
// the client's timing (on loopback a request takes a fraction of a
// millisecond, so few requests fall across a boundary). Fixed windows are
// aligned like the server's (Unix time / window, the client's clock; exact
// on loopback). Counts are per stream: streams that share one budget (two
// anonymous streams from one address on one rule, streams of identities a
// server such as the demo does not list and keys by address, or a prefix
// rule over two routes) should be compared with the limit together.
type StreamReport struct {
	Stream
	Counts
	// MaxLagMs is the latest a send left after its schedule, in ms.
	MaxLagMs float64 `json:"max_lag_ms"`
	// Statuses counts the non-2xx answers by status code.
	Statuses map[string]int64 `json:"statuses,omitempty"`
	// FirstError is the first request error, if any.
	FirstError string `json:"first_error,omitempty"`
	// Limit is the last X-RateLimit-Limit seen (else RateLimit-Policy
	// q=); 0 when the route sent none (not limited).
	Limit int64 `json:"limit"`
	// WindowMs is the window the per-window counts use, in ms; 0 if none.
	WindowMs int64 `json:"window_ms"`
	// WindowFrom names where the window came from: X-RateLimit-Window-Ms,
	// RateLimit-Policy or -window.
	WindowFrom string `json:"window_from,omitempty"`
	// Strategy is the last X-RateLimit-Strategy seen (the algorithm).
	Strategy string `json:"strategy,omitempty"`
	// MaxFixed is the most admitted in one aligned fixed window.
	MaxFixed *WindowMax `json:"max_fixed_window,omitempty"`
	// MaxSliding is the most admitted in any interval one window long.
	// Above the limit is expected on fixed-window routes (a burst on both
	// sides of a boundary), never on sliding-log ones.
	MaxSliding *WindowMax `json:"max_sliding_window,omitempty"`
	// Latency is over every answered request, measured from its send.
	Latency Latency `json:"latency_ms"`
}

// WindowMax is the most requests admitted in one window.
type WindowMax struct {
	// Admitted is the count.
	Admitted int64 `json:"admitted"`
	// OfLimit is Admitted / Limit; 0 when the limit is unknown.
	OfLimit float64 `json:"of_limit"`
}

// Latency holds latency percentiles in milliseconds (nearest rank).
type Latency struct {
	// N is the number of answered requests.
	N int `json:"n"`
	// P50 is the median.
	P50 float64 `json:"p50"`
	// P90 is the 90th percentile.
	P90 float64 `json:"p90"`
	// P99 is the 99th percentile.
	P99 float64 `json:"p99"`
	// Max is the slowest answer.
	Max float64 `json:"max"`
}

// report builds the Report of g, stopped scheduling after stopped and
// finished after elapsed.
func (g *gen) report(stopped, elapsed time.Duration, interrupted bool, t target) *Report {
	r := &Report{
		URL:         t.base,
		Started:     g.start,
		DurationS:   g.cfg.Duration.Seconds(),
		ElapsedS:    elapsed.Seconds(),
		Interrupted: interrupted,
		Concurrency: g.cfg.Concurrency,
	}
	base := g.start.UnixNano()
	for _, st := range g.streams {
		sr := StreamReport{Stream: st.Stream}
		sr.Planned = int64(st.planned)
		sr.Sent = st.sent.Load()
		sr.Admitted = st.admitted.Load()
		sr.Denied = st.denied.Load()
		sr.Other = st.other.Load()
		sr.Errors = st.failed.Load()
		sr.Late = st.late.Load()
		sr.Missed = max(0, int64(min(plannedSends(st.Rate, stopped), st.planned))-sr.Sent)
		sr.MaxLagMs = ms(st.maxLag.Load())

		st.mu.Lock()
		sr.FirstError = st.firstErr
		sr.Limit = st.limit
		sr.Strategy = st.strategy
		w, from := st.window, st.winFrom
		spans := slices.Clone(st.spans)
		lat := slices.Clone(st.lat)
		for code, n := range st.statuses {
			if sr.Statuses == nil {
				sr.Statuses = make(map[string]int64)
			}
			sr.Statuses[strconv.Itoa(code)] = n
		}
		st.mu.Unlock()

		if w == 0 && g.cfg.Window > 0 {
			w, from = g.cfg.Window, fromFlag
		}
		if w > 0 {
			sr.WindowMs = int64(w / time.Millisecond)
			sr.WindowFrom = from
			sr.MaxFixed = windowMax(maxFixed(spans, base, int64(w)), sr.Limit)
			sr.MaxSliding = windowMax(maxSliding(spans, int64(w)), sr.Limit)
		}
		sr.Latency = percentiles(lat)
		r.Total.add(sr.Counts)
		r.Streams = append(r.Streams, sr)
	}
	return r
}

// windowMax pairs a count with its multiple of limit.
func windowMax(n, limit int64) *WindowMax {
	m := &WindowMax{Admitted: n}
	if limit > 0 {
		m.OfLimit = float64(n) / float64(limit)
	}
	return m
}

// ms converts nanoseconds to milliseconds.
func ms(ns int64) float64 { return float64(ns) / 1e6 }

// maxFixed returns the most spans inside one window aligned like the
// server's fixed window: id = floor(unix_nanos / w), where a span's unix
// times are base plus its offsets. A span whose send and answer fall in
// different windows counts in neither.
func maxFixed(spans []span, base, w int64) int64 {
	counts := make(map[int64]int64)
	var best int64
	for _, s := range spans {
		id := (base + s.sent) / w
		if id != (base+s.answered)/w {
			continue
		}
		counts[id]++
		best = max(best, counts[id])
	}
	return best
}

// maxSliding returns the most spans inside any interval [a, a+w): those
// with a <= sent and answered < a+w. The best a is some span's sent time;
// for each, in decreasing order, the answers of the spans sent at or after
// it are counted below a+w with a Fenwick tree over the answer times'
// ranks, so this is O(n log n).
func maxSliding(spans []span, w int64) int64 {
	n := len(spans)
	if n == 0 {
		return 0
	}
	byStart := slices.Clone(spans)
	slices.SortFunc(byStart, func(a, b span) int { return cmp.Compare(a.sent, b.sent) })
	answers := make([]int64, n)
	for i, s := range spans {
		answers[i] = s.answered
	}
	slices.Sort(answers)
	tree := make([]int64, n+1) // Fenwick tree over answer ranks 1..n
	var best int64
	for k := n - 1; k >= 0; k-- {
		rank, _ := slices.BinarySearch(answers, byStart[k].answered) // first equal
		for i := rank + 1; i <= n; i += i & -i {
			tree[i]++
		}
		below := sort.Search(n, func(i int) bool { return answers[i] >= byStart[k].sent+w })
		var c int64
		for i := below; i > 0; i -= i & -i {
			c += tree[i]
		}
		best = max(best, c)
	}
	return best
}

// percentiles returns the nearest-rank percentiles of lat (nanoseconds).
func percentiles(lat []int64) Latency {
	if len(lat) == 0 {
		return Latency{}
	}
	slices.Sort(lat)
	at := func(p float64) float64 {
		i := int(math.Ceil(p/100*float64(len(lat)))) - 1
		return ms(lat[max(0, min(i, len(lat)-1))])
	}
	return Latency{N: len(lat), P50: at(50), P90: at(90), P99: at(99), Max: ms(lat[len(lat)-1])}
}

// WriteJSON writes r as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes r as a table with a few lines of explanation.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	if r.Interrupted {
		fmt.Fprintf(&b, "interrupted after %.1fs: the report so far\n", r.ElapsedS)
	}
	plural := "s"
	if len(r.Streams) == 1 {
		plural = ""
	}
	fmt.Fprintf(&b, "%s for %s (%.1fs to the last answer), %d stream%s, concurrency %d\n\n",
		r.URL, fmtDur(time.Duration(r.DurationS*float64(time.Second))), r.ElapsedS, len(r.Streams), plural, r.Concurrency)
	rows := [][]string{{"client", "route", "rate", "sent", "2xx", "429", "other", "err", "late",
		"limit/window", "algorithm", "max fixed-window", "max sliding-window", "p50", "p90", "p99", "max"}}
	for _, s := range r.Streams {
		limit, alg := "-", "-"
		if s.Limit > 0 {
			limit = strconv.FormatInt(s.Limit, 10)
		}
		if s.WindowMs > 0 {
			limit += "/" + fmtDur(time.Duration(s.WindowMs)*time.Millisecond)
		}
		if s.Strategy != "" {
			alg = s.Strategy
		}
		lat := func(v float64) string {
			if s.Latency.N == 0 {
				return "-"
			}
			return strconv.FormatFloat(v, 'f', 2, 64) + "ms"
		}
		rows = append(rows, []string{s.Client, s.Route, formatRate(s.Rate),
			itoa(s.Sent), itoa(s.Admitted), itoa(s.Denied), itoa(s.Other), itoa(s.Errors), itoa(s.Late),
			limit, alg, fmtMax(s.MaxFixed, s.Limit), fmtMax(s.MaxSliding, s.Limit),
			lat(s.Latency.P50), lat(s.Latency.P90), lat(s.Latency.P99), lat(s.Latency.Max)})
	}
	t := r.Total
	rows = append(rows, []string{"total", "", "", itoa(t.Sent), itoa(t.Admitted), itoa(t.Denied),
		itoa(t.Other), itoa(t.Errors), itoa(t.Late)})
	writeTable(&b, rows, map[int]bool{0: true, 1: true, 10: true})
	b.WriteString("\nmax fixed-window: most 2xx in one window aligned like the server's (Unix time / window);\n" +
		"max sliding-window: most 2xx in any interval one window long (above 1.00x is the boundary\n" +
		"burst a fixed window allows; a sliding log never shows it). x = multiple of the limit.\n")
	if t.Late > 0 || t.Missed > 0 {
		fmt.Fprintf(&b, "behind schedule: %d sends left more than %v late and %d never left (server slower than the\n"+
			"schedule, or -concurrency too low); latency is from the actual send.\n", t.Late, LateAfter, t.Missed)
	}
	for _, s := range r.Streams {
		if s.Admitted == 0 && s.Denied > 0 {
			fmt.Fprintf(&b, "%s %s: no request admitted: its budget was spent before the run (an earlier run in the same window?)\n", s.Client, s.Route)
		}
		if s.FirstError != "" {
			fmt.Fprintf(&b, "%s %s: %d errors, first: %s\n", s.Client, s.Route, s.Errors, s.FirstError)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// itoa formats n in decimal.
func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// writeTable writes rows as columns two spaces apart, the columns in left
// aligned to the left and the others to the right. Rows may be short.
func writeTable(b *strings.Builder, rows [][]string, left map[int]bool) {
	var width []int
	for _, row := range rows {
		for i, cell := range row {
			if i == len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(cell))
		}
	}
	for _, row := range rows {
		var line strings.Builder
		for i, cell := range row {
			if i > 0 {
				line.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(cell))
			if left[i] {
				line.WriteString(cell + pad)
			} else {
				line.WriteString(pad + cell)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
}

// fmtMax formats a window maximum as "10 (1.00x)".
func fmtMax(m *WindowMax, limit int64) string {
	if m == nil {
		return "-"
	}
	if limit <= 0 {
		return strconv.FormatInt(m.Admitted, 10)
	}
	return fmt.Sprintf("%d (%.2fx)", m.Admitted, m.OfLimit)
}

// fmtDur formats d briefly: "1m", "10s", "1m30s", "250ms".
func fmtDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
