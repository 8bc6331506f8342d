// Package shardlimitprom exports shardlimit's counters to Prometheus: a
// prometheus.Collector over limiters and HTTP middlewares, whose metric
// families are those package github.com/shardlimit/shardlimit/metrics
// describes (names, help, types and labels).
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(shardlimitprom.NewCollector(
//		metrics.Middleware(mw),           // every rule of a fasthttpmw or httpmw middleware
//		metrics.Limiter("login", limiter), // a limiter of your own
//	))
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// The collector reads counters the limiters keep anyway, when Prometheus
// scrapes: it adds no work, lock or atomic operation to decisions. A
// scrape takes each limiter's shard locks in turn, briefly.
//
// This package is a module of its own, so that shardlimit's module does
// not depend on prometheus/client_golang.
package shardlimitprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardlimit/shardlimit/metrics"
)

// Collector is a prometheus.Collector of shardlimit sources. It is safe
// for concurrent use, as Prometheus requires.
type Collector struct {
	sources []metrics.Source
	descs   map[*metrics.Family]*prometheus.Desc
	types   map[*metrics.Family]prometheus.ValueType
}

// NewCollector returns a collector of sources (metrics.Limiter,
// metrics.Middleware), read in order at every scrape. A registry takes one
// such collector: give it every source. Sources must not share names (a
// middleware's rules are named by its rule set); to export middlewares
// whose rules share names, register a collector for each through
// prometheus.WrapRegistererWith with a label that tells them apart.
func NewCollector(sources ...metrics.Source) *Collector {
	c := &Collector{
		sources: sources,
		descs:   map[*metrics.Family]*prometheus.Desc{},
		types:   map[*metrics.Family]prometheus.ValueType{},
	}
	for _, f := range metrics.Families() {
		c.descs[f] = prometheus.NewDesc(f.Name, f.Help, f.Labels, nil)
		c.types[f] = prometheus.GaugeValue
		if f.Type == metrics.Counter {
			c.types[f] = prometheus.CounterValue
		}
	}
	return c
}

// Describe sends the description of every family the collector may
// report.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, f := range metrics.Families() {
		ch <- c.descs[f]
	}
}

// Collect reads every source and sends its samples.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	metrics.Collect(func(s metrics.Sample) {
		d := c.descs[s.Family]
		m, err := prometheus.NewConstMetric(d, c.types[s.Family], s.Value, s.Labels...)
		if err != nil {
			m = prometheus.NewInvalidMetric(d, err)
		}
		ch <- m
	}, c.sources...)
}
