// Package shardlimitotel exports shardlimit's counters as OpenTelemetry
// metrics: one asynchronous instrument per metric family that package
// github.com/shardlimit/shardlimit/metrics describes, observed by one
// callback when the MeterProvider's reader collects.
//
//	reg, err := shardlimitotel.Register(provider.Meter("myservice"),
//		metrics.Middleware(mw),           // every rule of a fasthttpmw or httpmw middleware
//		metrics.Limiter("login", limiter), // a limiter of your own
//	)
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer reg.Unregister()
//
// The callback reads counters the limiters keep anyway: it adds no work,
// lock or atomic operation to decisions. A collection takes each
// limiter's shard locks in turn, briefly.
//
// Instrument names are the Prometheus names of package metrics written the
// OpenTelemetry way (see Name): "shardlimit_decisions_total" is the counter
// "shardlimit.decisions", "shardlimit_window_seconds" the gauge
// "shardlimit.window" of unit "s". An OpenTelemetry exporter to Prometheus
// that adds unit and type suffixes turns them back into the Prometheus
// names. Labels become attributes of the same names.
//
// This package is a module of its own, so that shardlimit's module does
// not depend on OpenTelemetry.
package shardlimitotel

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/shardlimit/shardlimit/metrics"
)

// Name returns the instrument name of family f: its Prometheus name
// without the "_total" suffix of counters and the "_seconds" suffix of
// unit "s", and with a dot after the "shardlimit" namespace.
func Name(f *metrics.Family) string {
	n := strings.TrimSuffix(f.Name, "_total")
	if f.Unit == "s" {
		n = strings.TrimSuffix(n, "_seconds")
	}
	return strings.Replace(n, "shardlimit_", "shardlimit.", 1)
}

// Register creates on meter one asynchronous instrument per family of
// package metrics (a Float64ObservableCounter for each counter, a
// Float64ObservableGauge for each gauge, with the family's help as
// description and its unit) and registers a callback that observes every
// source (metrics.Limiter, metrics.Middleware) at each collection. Sources
// must not share names. Unregister the returned Registration to stop
// observing them. Errors are the meter's, wrapped.
func Register(meter metric.Meter, sources ...metrics.Source) (metric.Registration, error) {
	inst := map[*metrics.Family]metric.Float64Observable{}
	var all []metric.Observable
	for _, f := range metrics.Families() {
		var o metric.Float64Observable
		var err error
		switch f.Type {
		case metrics.Counter:
			o, err = meter.Float64ObservableCounter(Name(f), metric.WithDescription(f.Help), metric.WithUnit(f.Unit))
		default:
			o, err = meter.Float64ObservableGauge(Name(f), metric.WithDescription(f.Help), metric.WithUnit(f.Unit))
		}
		if err != nil {
			return nil, fmt.Errorf("shardlimitotel: instrument %s: %w", Name(f), err)
		}
		inst[f] = o
		all = append(all, o)
	}
	reg, err := meter.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		metrics.Collect(func(s metrics.Sample) {
			kvs := make([]attribute.KeyValue, len(s.Labels))
			for i, v := range s.Labels {
				kvs[i] = attribute.String(s.Family.Labels[i], v)
			}
			obs.ObserveFloat64(inst[s.Family], s.Value, metric.WithAttributes(kvs...))
		}, sources...)
		return nil
	}, all...)
	if err != nil {
		return nil, fmt.Errorf("shardlimitotel: callback: %w", err)
	}
	return reg, nil
}
