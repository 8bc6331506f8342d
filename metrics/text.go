package metrics

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// TextContentType is the Content-Type of what WriteText writes: version
// 0.0.4 of the Prometheus text exposition format.
const TextContentType = "text/plain; version=0.0.4; charset=utf-8"

// WriteText collects sources (see Collect) and writes the samples to w in
// the Prometheus text exposition format, version 0.0.4, as
// prometheus/client_golang's registry writes them: families sorted by
// name, each with its HELP and TYPE lines, label pairs sorted by name,
// samples sorted by label values; families without samples are left out.
// It returns an error, having written nothing, if two samples of one
// family have the same label values (two sources with one name), else w's
// first error.
//
// It serves programs that do not link a Prometheus client, such as the
// demo server; with prometheus/client_golang, register the collector of
// the exporters/shardlimitprom module instead.
func WriteText(w io.Writer, sources ...Source) error {
	byFamily := map[*Family][]Sample{}
	Collect(func(s Sample) { byFamily[s.Family] = append(byFamily[s.Family], s) }, sources...)
	families := Families()
	slices.SortFunc(families, func(a, b *Family) int { return strings.Compare(a.Name, b.Name) })
	// Sort and check every family before writing anything.
	type sorted struct {
		f       *Family
		order   []int // label positions by label name
		samples []Sample
	}
	var out []sorted
	for _, f := range families {
		samples := byFamily[f]
		if len(samples) == 0 {
			continue
		}
		order := make([]int, len(f.Labels))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int { return strings.Compare(f.Labels[a], f.Labels[b]) })
		slices.SortFunc(samples, func(a, b Sample) int {
			for _, i := range order {
				if c := strings.Compare(a.Labels[i], b.Labels[i]); c != 0 {
					return c
				}
			}
			return 0
		})
		for i := 1; i < len(samples); i++ {
			if slices.Equal(samples[i-1].Labels, samples[i].Labels) {
				return fmt.Errorf("metrics: %s collected twice with labels %q (two sources of one name?)", f.Name, samples[i].Labels)
			}
		}
		out = append(out, sorted{f, order, samples})
	}
	bw := bufio.NewWriter(w)
	for _, fs := range out {
		f, order, samples := fs.f, fs.order, fs.samples
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s %s\n", f.Name, escapeHelp(f.Help), f.Name, f.Type)
		for _, s := range samples {
			bw.WriteString(f.Name)
			if len(order) > 0 {
				bw.WriteByte('{')
				for n, i := range order {
					if n > 0 {
						bw.WriteByte(',')
					}
					bw.WriteString(f.Labels[i])
					bw.WriteString(`="`)
					bw.WriteString(escapeLabel(s.Labels[i]))
					bw.WriteByte('"')
				}
				bw.WriteByte('}')
			}
			bw.WriteByte(' ')
			bw.WriteString(textValue(s.Value))
			bw.WriteByte('\n')
		}
	}
	return bw.Flush()
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

func escapeHelp(s string) string  { return helpEscaper.Replace(s) }
func escapeLabel(s string) string { return labelEscaper.Replace(s) }

// textValue formats v as the text format writes numbers.
func textValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
