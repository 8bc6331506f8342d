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
	var out []sortedFamily
	for _, f := range families {
		if len(byFamily[f]) == 0 {
			continue
		}
		sf, err := sortFamily(f, byFamily[f])
		if err != nil {
			return err
		}
		out = append(out, sf)
	}
	bw := bufio.NewWriter(w)
	for _, sf := range out {
		sf.write(bw)
	}
	return bw.Flush()
}

// sortedFamily is a family's samples as WriteText writes them.
type sortedFamily struct {
	f       *Family
	order   []int // label positions by label name
	samples []Sample
}

// sortFamily sorts the samples of f by label values, the labels taken in
// name order, and returns an error if two have the same label values.
func sortFamily(f *Family, samples []Sample) (sortedFamily, error) {
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
			return sortedFamily{}, fmt.Errorf("metrics: %s collected twice with labels %q (two sources of one name?)", f.Name, samples[i].Labels)
		}
	}
	return sortedFamily{f, order, samples}, nil
}

// write writes the family's HELP and TYPE lines and samples to bw.
func (sf *sortedFamily) write(bw *bufio.Writer) {
	f := sf.f
	fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s %s\n", f.Name, escapeHelp(f.Help), f.Name, f.Type)
	for _, s := range sf.samples {
		bw.WriteString(f.Name)
		if len(sf.order) > 0 {
			bw.WriteByte('{')
			for n, i := range sf.order {
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
