// Command benchreport turns benchstat's CSV output (benchstat -format csv,
// one input file per benchstat run) into markdown tables that state every
// limiter's median against the fastest peer measured in the same run.
//
// Benchmarks are named Benchmark<Scenario>/<limiter>[-<GOMAXPROCS>].
// Limiters named "shardlimit_*" are ours, "bare" is a baseline without a
// limiter, every other name is a peer. A scenario and its "Now" twin
// (HotKey and HotKeyNow) form one group with the same GOMAXPROCS: the
// fastest peer of the group is the reference of both, since the targets
// compare an explicit-now call with the fastest peer however it reads time.
// A second ratio, "× same call", compares like with like: against the
// fastest peer of the scenario itself (a peer's Allow with its clock read
// for Allow, its explicit-now call for AllowAt), where the scenario has a
// peer. For BenchmarkMemory the reference is the fewest B/key among peers that
// keep the full key (httprate keeps a 64-bit hash only).
//
// Usage:
//
//	benchreport file.csv...
package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// row is one benchmark's medians by unit.
type row struct {
	scenario string // "HotKeyNow"
	limiter  string // "shardlimit_gcra"
	procs    string // GOMAXPROCS: the name's suffix, "1" without one
	vals     map[string]float64
}

// keyless are peers that do not store the key (excluded from the B/key
// reference).
var keyless = map[string]bool{"httprate": true}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: benchreport file.csv...")
		os.Exit(2)
	}
	var rows []*row
	for _, name := range os.Args[1:] {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchreport:", err)
			os.Exit(1)
		}
		rs, err := parse(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchreport: %s: %v\n", name, err)
			os.Exit(1)
		}
		rows = append(rows, rs...)
	}
	write(os.Stdout, rows)
}

// parse reads benchstat CSV: sections of a unit header row (",unit,CI")
// followed by "name,value,CI" rows.
func parse(r io.Reader) ([]*row, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	byName := map[string]*row{}
	var order []*row
	unit := ""
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		switch {
		case len(rec) < 2:
			continue
		case rec[0] == "" && len(rec) >= 3 && rec[2] == "CI":
			unit = rec[1]
			continue
		case rec[0] == "" || rec[0] == "geomean" || unit == "":
			continue
		}
		v, err := strconv.ParseFloat(rec[1], 64)
		if err != nil {
			continue
		}
		rw := byName[rec[0]]
		if rw == nil {
			rw = split(rec[0])
			if rw == nil {
				continue
			}
			byName[rec[0]] = rw
			order = append(order, rw)
		}
		u := unit
		switch {
		case u == "sec/op":
			u, v = "ns/op", v*1e9
		case strings.HasSuffix(u, "-sec"):
			// benchstat turns a custom "x-ns" metric into "x-sec".
			u, v = strings.TrimSuffix(u, "-sec")+"-ns", v*1e9
		}
		rw.vals[u] = v
	}
	return order, nil
}

// split parses "Scenario/limiter-2".
func split(name string) *row {
	scenario, lim, ok := strings.Cut(name, "/")
	if !ok {
		return nil
	}
	// go test omits the suffix when GOMAXPROCS is 1.
	r := &row{scenario: scenario, limiter: lim, procs: "1", vals: map[string]float64{}}
	if i := strings.LastIndexByte(lim, '-'); i >= 0 {
		if _, err := strconv.Atoi(lim[i+1:]); err == nil {
			r.limiter, r.procs = lim[:i], lim[i+1:]
		}
	}
	return r
}

func ours(l string) bool { return strings.HasPrefix(l, "shardlimit_") }
func peer(l string) bool { return !ours(l) && l != "bare" && l != "none" }

// group is the key of the rows sharing a reference.
func group(r *row) string {
	return strings.Replace(r.scenario, "Now", "", 1) + "-" + r.procs
}

func write(w io.Writer, rows []*row) {
	// The reference of each group.
	type ref struct {
		v    float64
		name string
	}
	refs := map[string]ref{}  // by group
	sames := map[string]ref{} // by scenario and GOMAXPROCS
	for _, r := range rows {
		unit := refUnit(r)
		v, has := r.vals[unit]
		if !has || !peer(r.limiter) || (unit == "B/key" && keyless[r.limiter]) {
			continue
		}
		g := group(r)
		if cur, seen := refs[g]; !seen || v < cur.v {
			refs[g] = ref{v, r.scenario + "/" + r.limiter}
		}
		k := r.scenario + "-" + r.procs
		if cur, seen := sames[k]; !seen || v < cur.v {
			sames[k] = ref{v, r.limiter}
		}
	}
	var scenarios []string
	byScenario := map[string][]*row{}
	for _, r := range rows {
		k := r.scenario + " (GOMAXPROCS=" + r.procs + ")"
		if _, ok := byScenario[k]; !ok {
			scenarios = append(scenarios, k)
		}
		byScenario[k] = append(byScenario[k], r)
	}
	for _, s := range scenarios {
		rs := byScenario[s]
		unit := refUnit(rs[0])
		rf, hasRef := refs[group(rs[0])]
		same, hasSame := sames[rs[0].scenario+"-"+rs[0].procs]
		// One ratio column when the two references are the same row.
		twoRatios := hasSame && same.name != "" && rf.name != rs[0].scenario+"/"+same.name
		fmt.Fprintf(w, "### %s\n\n", s)
		switch {
		case hasRef && twoRatios:
			fmt.Fprintf(w, "Reference: %s, %s %s; same call: %s, %s %s.\n\n", rf.name, num(rf.v), unit, same.name, num(same.v), unit)
		case hasRef:
			fmt.Fprintf(w, "Reference: %s, %s %s.\n\n", rf.name, num(rf.v), unit)
		default:
			fmt.Fprintf(w, "No peer measured: no ratio.\n\n")
		}
		cols := columns(rs)
		if twoRatios {
			fmt.Fprintf(w, "| limiter | %s | × reference | × same call |\n", strings.Join(cols, " | "))
			fmt.Fprintf(w, "|---|%s---:|---:|\n", strings.Repeat("---:|", len(cols)))
		} else {
			fmt.Fprintf(w, "| limiter | %s | × reference |\n", strings.Join(cols, " | "))
			fmt.Fprintf(w, "|---|%s---:|\n", strings.Repeat("---:|", len(cols)))
		}
		for _, r := range rs {
			name := r.limiter
			if ours(name) {
				name = "**" + name + "**"
			}
			cells := make([]string, len(cols))
			for i, c := range cols {
				if v, ok := r.vals[c]; ok {
					cells[i] = num(v)
				}
			}
			ratio, sameRatio := "", ""
			if v, ok := r.vals[unit]; ok && r.limiter != "none" {
				if hasRef && rf.v > 0 {
					ratio = fmt.Sprintf("%.2f", v/rf.v)
				}
				if hasSame && same.v > 0 {
					sameRatio = fmt.Sprintf("%.2f", v/same.v)
				}
			}
			if twoRatios {
				fmt.Fprintf(w, "| %s | %s | %s | %s |\n", name, strings.Join(cells, " | "), ratio, sameRatio)
			} else {
				fmt.Fprintf(w, "| %s | %s | %s |\n", name, strings.Join(cells, " | "), ratio)
			}
		}
		fmt.Fprintln(w)
	}
}

// refUnit is the unit compared against the reference: B/key for the
// memory scenario, ns/op for the others.
func refUnit(r *row) string {
	if _, ok := r.vals["B/key"]; ok || r.scenario == "Memory" {
		return "B/key"
	}
	return "ns/op"
}

// columns lists the units present in rs, ns/op first.
func columns(rs []*row) []string {
	seen := map[string]bool{}
	var cols []string
	for _, r := range rs {
		for u := range r.vals {
			if !seen[u] {
				seen[u] = true
				cols = append(cols, u)
			}
		}
	}
	rank := func(u string) int {
		switch u {
		case "ns/op":
			return 0
		case "B/key":
			return 1
		case "gc-ns":
			return 2
		case "allocs/op":
			return 3
		case "B/op":
			return 4
		}
		return 5
	}
	slices.SortFunc(cols, func(a, b string) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return cols
}

// num formats v with three significant digits, or as an integer when large.
func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}
