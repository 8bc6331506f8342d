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
// the Prometheus text exposition format, version 0.0.4: families in the
// order of Families, each with its HELP and TYPE lines, its samples sorted
// by label values; families without samples are left out. It returns an
// error, having written nothing, if two samples of one family have the
// same label values (two sources with one name), else w's first error.
//
// It serves programs that do not link a Prometheus client, such as the
// demo server; with prometheus/client_golang, register the collector of
// the exporters/shardlimitprom module instead.
func WriteText(w io.Writer, sources ...Source) error {
	byFamily := map[*Family][]Sample{}
	Collect(func(s Sample) { byFamily[s.Family] = append(byFamily[s.Family], s) }, sources...)
	bw := bufio.NewWriter(w)
	for _, f := range Families() {
		samples := byFamily[f]
		if len(samples) == 0 {
			continue
		}
		slices.SortStableFunc(samples, func(a, b Sample) int { return slices.Compare(a.Labels, b.Labels) })
		for i := 1; i < len(samples); i++ {
			if slices.Equal(samples[i-1].Labels, samples[i].Labels) {
				return fmt.Errorf("metrics: %s collected twice with labels %q (two sources of one name?)", f.Name, samples[i].Labels)
			}
		}
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s %s\n", f.Name, escapeHelp(f.Help), f.Name, f.Type)
		for _, s := range samples {
			bw.WriteString(f.Name)
			if len(f.Labels) > 0 {
				bw.WriteByte('{')
				for i, name := range f.Labels {
					if i > 0 {
						bw.WriteByte(',')
					}
					bw.WriteString(name)
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
