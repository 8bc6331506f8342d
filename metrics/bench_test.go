package metrics_test

import (
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/httpmw"
	"github.com/shardlimit/shardlimit/internal/mwtest"
	"github.com/shardlimit/shardlimit/metrics"
)

// countingWriter counts the bytes written to it.
type countingWriter struct{ n int }

func (w *countingWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }

// BenchmarkWriteText measures one scrape of a middleware of 1,000 and
// 10,000 rules in memory (the four algorithms in turn), per rule and
// grouped: ns and B per scrape, and the bytes written.
func BenchmarkWriteText(b *testing.B) {
	algs := []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingLog, shardlimit.SlidingCounter, shardlimit.GCRA}
	for _, n := range []int{1000, 10000} {
		rules := &httplimit.Rules{}
		for i := range n {
			rules.Rules = append(rules.Rules, httplimit.Rule{Name: fmt.Sprint("rule-", i), Path: fmt.Sprint("/r", i),
				Algorithm: algs[i%len(algs)], Limit: 5 + i, Window: time.Minute})
		}
		mw, err := httpmw.New(httpmw.Config{Options: httplimit.Options{Rules: rules, Clock: shardlimit.NewManualClock(mwtest.T0)}})
		if err != nil {
			b.Fatal(err)
		}
		for _, g := range []struct {
			name string
			opts []metrics.Option
		}{{"per_rule", nil}, {"AllRules", []metrics.Option{metrics.WithGroup(metrics.AllRules)}}} {
			src := metrics.Middleware(mw, g.opts...)
			b.Run(fmt.Sprintf("rules=%d/%s", n, g.name), func(b *testing.B) {
				var w countingWriter
				if err := metrics.WriteText(&w, src); err != nil {
					b.Fatal(err)
				}
				size := w.n
				b.ReportAllocs()
				for b.Loop() {
					if err := metrics.WriteText(io.Discard, src); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(size), "bytes/scrape")
			})
		}
		mw.Close()
	}
}
