package metrics

import (
	"cmp"
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
//
// Its work and garbage are linear in the series (sources emit in label
// order, so little is sorted): about 160 bytes of garbage per series,
// reading a middleware's rules included; BenchmarkWriteText measures a
// middleware of 1,000 and 10,000 rules.
func WriteText(w io.Writer, sources ...Source) error {
	var all sampleChunks
	Collect(all.add, sources...)
	byFamily := all.byFamily()
	// Sort and check every family before writing anything.
	for i, samples := range byFamily {
		if err := sortFamily(textFamilies[i], samples); err != nil {
			return err
		}
	}
	tw := textWriter{w: w, buf: make([]byte, 0, textChunk+4096)}
	for i, samples := range byFamily {
		if len(samples) > 0 {
			tw.family(textFamilies[i], samples)
		}
	}
	return tw.flush()
}

// textFamily is a family as WriteText writes it: its header lines and its
// label names in name order, made once.
type textFamily struct {
	f      *Family
	header string // the HELP and TYPE lines
	order  []int  // label positions by label name
}

// textFamilies are the families in name order; each Family's text field
// is its position there.
var textFamilies = makeTextFamilies()

func makeTextFamilies() []textFamily {
	fs := Families()
	slices.SortFunc(fs, func(a, b *Family) int { return strings.Compare(a.Name, b.Name) })
	out := make([]textFamily, len(fs))
	for i, f := range fs {
		order := make([]int, len(f.Labels))
		for k := range order {
			order[k] = k
		}
		slices.SortFunc(order, func(a, b int) int { return strings.Compare(f.Labels[a], f.Labels[b]) })
		header := "# HELP " + f.Name + " " + helpEscaper.Replace(f.Help) + "\n# TYPE " + f.Name + " " + f.Type.String() + "\n"
		out[i] = textFamily{f, header, order}
		f.text = i
	}
	return out
}

// sampleChunks holds samples in arrays of sampleChunk: appending never
// copies what it holds.
type sampleChunks struct {
	chunks [][]Sample
	n      int
}

const sampleChunk = 4096

func (c *sampleChunks) add(s Sample) {
	if k := len(c.chunks); k == 0 || len(c.chunks[k-1]) == sampleChunk {
		c.chunks = append(c.chunks, make([]Sample, 0, sampleChunk))
	}
	last := &c.chunks[len(c.chunks)-1]
	*last = append(*last, s)
	c.n++
}

// byFamily returns the samples of each of textFamilies, in the order they
// came, in one backing array: a counting sort by family.
func (c *sampleChunks) byFamily() [][]Sample {
	counts := make([]int, len(textFamilies))
	for _, chunk := range c.chunks {
		for i := range chunk {
			counts[chunk[i].Family.text]++
		}
	}
	out := make([][]Sample, len(textFamilies))
	sorted := make([]Sample, c.n)
	at := 0
	for k, n := range counts {
		out[k] = sorted[at : at : at+n]
		at += n
	}
	for _, chunk := range c.chunks {
		for i := range chunk {
			k := chunk[i].Family.text
			out[k] = append(out[k], chunk[i])
		}
	}
	return out
}

// sortFamily sorts the samples of tf by label values, the labels taken in
// name order (unless they came sorted), and returns an error if two have
// the same label values.
func sortFamily(tf textFamily, samples []Sample) error {
	compare := func(a, b Sample) int {
		for _, i := range tf.order {
			if c := cmp.Compare(a.Labels[i], b.Labels[i]); c != 0 {
				return c
			}
		}
		return 0
	}
	if !slices.IsSortedFunc(samples, compare) {
		if k := tf.order[0]; k != 0 {
			// Sources emit by limiter; the family's first label in name
			// order (kind, algorithm) has few values: order by it, keeping
			// the order they came in otherwise.
			bucketBy(samples, k)
		}
		if !slices.IsSortedFunc(samples, compare) {
			slices.SortFunc(samples, compare)
		}
	}
	for i := 1; i < len(samples); i++ {
		if compare(samples[i-1], samples[i]) == 0 {
			return fmt.Errorf("metrics: %s collected twice with labels %q (two sources of one name?)", tf.f.Name, samples[i].Labels)
		}
	}
	return nil
}

// bucketBy orders samples by the value of label k, keeping their order
// otherwise (a stable counting sort), if that label has at most
// maxBuckets values among them; else it leaves them as they are.
func bucketBy(samples []Sample, k int) {
	const maxBuckets = 64
	var vals []string
	var counts []int
	which := make([]uint8, len(samples))
	for i := range samples {
		v := samples[i].Labels[k]
		j := slices.Index(vals, v)
		if j < 0 {
			if len(vals) == maxBuckets {
				return
			}
			j = len(vals)
			vals, counts = append(vals, v), append(counts, 0)
		}
		which[i] = uint8(j)
		counts[j]++
	}
	byValue := make([]int, len(vals))
	for j := range byValue {
		byValue[j] = j
	}
	slices.SortFunc(byValue, func(a, b int) int { return cmp.Compare(vals[a], vals[b]) })
	start, at := make([]int, len(vals)), 0
	for _, j := range byValue {
		start[j], at = at, at+counts[j]
	}
	out := make([]Sample, len(samples))
	for i := range samples {
		j := which[i]
		out[start[j]] = samples[i]
		start[j]++
	}
	copy(samples, out)
}

// textChunk is how many bytes textWriter gathers before it writes them.
const textChunk = 32 << 10

// textWriter appends lines to buf and writes them to w in chunks of about
// textChunk bytes, keeping w's first error (and writing no more after it).
type textWriter struct {
	w   io.Writer
	buf []byte
	err error
}

func (tw *textWriter) flush() error {
	if tw.err == nil && len(tw.buf) > 0 {
		_, tw.err = tw.w.Write(tw.buf)
	}
	tw.buf = tw.buf[:0]
	return tw.err
}

// family writes tf's header lines and samples.
func (tw *textWriter) family(tf textFamily, samples []Sample) {
	f := tf.f
	tw.buf = append(tw.buf, tf.header...)
	for _, s := range samples {
		b := append(tw.buf, f.Name...)
		if len(tf.order) > 0 {
			b = append(b, '{')
			for n, i := range tf.order {
				if n > 0 {
					b = append(b, ',')
				}
				b = append(b, f.Labels[i]...)
				b = append(b, `="`...)
				b = appendLabel(b, s.Labels[i])
				b = append(b, '"')
			}
			b = append(b, '}')
		}
		b = append(b, ' ')
		b = appendValue(b, s.Value)
		tw.buf = append(b, '\n')
		if len(tw.buf) >= textChunk {
			tw.flush()
		}
	}
}

var helpEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`)

// appendLabel appends label value v to b with backslash, newline and
// double quote escaped.
func appendLabel(b []byte, v string) []byte {
	if !strings.ContainsAny(v, "\\\n\"") {
		return append(b, v...)
	}
	for i := range len(v) {
		switch c := v[i]; c {
		case '\\':
			b = append(b, `\\`...)
		case '\n':
			b = append(b, `\n`...)
		case '"':
			b = append(b, `\"`...)
		default:
			b = append(b, c)
		}
	}
	return b
}

// appendValue appends v to b as the text format writes numbers.
func appendValue(b []byte, v float64) []byte {
	switch {
	case math.IsInf(v, 1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	case math.IsNaN(v):
		return append(b, "NaN"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}
