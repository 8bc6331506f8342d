package metrics

import (
	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	shardsync "github.com/shardlimit/shardlimit/sync"
)

// Sample is one value of a family.
type Sample struct {
	// Family is the sample's family, one of those Families returns.
	Family *Family
	// Labels are the label values, in the order of Family.Labels. They
	// may be shared with other samples: read them, do not change them.
	Labels []string
	// Value is the value.
	Value float64
}

// Source is something whose counters Collect reads: a limiter (Limiter)
// or an HTTP middleware (Middleware).
type Source interface {
	collect(emit func(Sample))
}

// HTTPMiddleware is what Middleware reads: *fasthttpmw.Middleware and
// *httpmw.Middleware implement it.
type HTTPMiddleware interface {
	// RuleStats returns each rule in force with its counters (see
	// httplimit.RuleStats); Collect calls it at each reading.
	RuleStats() []httplimit.RuleStats
}

// Limiter returns a Source reading l under the label limiter=name: its
// algorithm, default limit and window, its Stats, and, for a limiter of
// package sync (anything with the SharedStats or ExactStats method of
// *sync.Shared or *sync.Exact), the state of its store. Reading takes each
// shard's lock of l in turn, briefly (shardlimit.Limiter.Stats), and adds
// nothing to decisions.
//
// Give every source a distinct, non-empty name: WriteText refuses two
// sources of one name (and a name of a middleware's rule), and an empty
// name is written as limiter="", which Prometheus stores as no label at
// all.
func Limiter(name string, l shardlimit.Limiter) Source {
	return limiterSource{name, l}
}

// Middleware returns a Source reading an HTTP middleware: every rule in
// force at collection time, each under the label limiter=<rule name>, with
// what Limiter reads of the rule's limiter, its decisions (denials are
// outcome would_deny under the middleware's dry run and on a shadow rule,
// httplimit.Rule.Shadow) and its undecided requests by kind. Rules that a reload removes disappear with their
// counters; rules whose limiter a reload keeps keep counting.
//
// Such a middleware emits 14 series per rule (more with a store: see the
// package doc), which grows with the rule set: WithGroup(AllRules), or
// another grouping, sums the rules into groups instead and bounds the
// series by the number of groups. Options are applied in order.
//
// Rule names are unique within a middleware; two middlewares collected
// together must not share rule names (or limiter names, or group names),
// or collect them apart with a label of their own (for Prometheus,
// prometheus.WrapRegistererWith). The Source is safe for concurrent use;
// a grouped one keeps, between collections, each member's last counts (a
// few words per rule and series) to keep its counters monotonic.
func Middleware(m HTTPMiddleware, opts ...Option) Source {
	var c middlewareConfig
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.group == nil {
		return middlewareSource{m}
	}
	return &groupSource{m: m, group: c.group}
}

// Collect reads every source once and calls emit for each sample, source
// by source in order. It is safe to call concurrently with decisions and
// with other Collects; it allocates, and takes every shard lock of each
// limiter in turn, once per call.
func Collect(emit func(Sample), sources ...Source) {
	for _, s := range sources {
		s.collect(emit)
	}
}

type limiterSource struct {
	name string
	l    shardlimit.Limiter
}

func (s limiterSource) collect(emit func(Sample)) {
	collectLimiter(emit, s.name, s.l, s.l.Stats(), "denied")
}

type middlewareSource struct{ m HTTPMiddleware }

func (s middlewareSource) collect(emit func(Sample)) {
	for _, r := range s.m.RuleStats() {
		collectRule(emit, r)
	}
}

// collectRule emits the families of middleware rule r under its name.
func collectRule(emit func(Sample), r httplimit.RuleStats) {
	denied := "denied"
	if r.DryRun || r.Shadow { // denials let through, or a shadow rule's
		denied = "would_deny"
	}
	collectLimiter(emit, r.Name, r.Limiter, r.Stats, denied)
	pairs := newLabelPairs(r.Name, 10)
	for _, k := range []struct {
		kind string
		n    uint64
	}{
		// In kind order, as WriteText writes them (it then sorts less).
		{"bad_cost", r.BadCost},
		{"closed", r.Errors.Closed},
		{"invalid", r.Errors.Invalid},
		{"no_identity", r.NoIdentity},
		{"other", r.Errors.Other},
		{"too_many_keys", r.Errors.TooManyKeys},
	} {
		emit(Sample{errorsTotal, pairs.with(k.kind), float64(k.n)})
	}
	if r.Settles {
		s := r.Settled
		emit(Sample{settledUnits, pairs.with("charged"), float64(s.Charged)})
		emit(Sample{settledUnits, pairs.with("refunded"), float64(s.Refunded)})
		emit(Sample{settleProblems, pairs.with("bad_report"), float64(s.BadReports)})
		emit(Sample{settleProblems, pairs.with("refused"), float64(s.Errors)})
	}
}

// labelPairs hands out label values (name, v) for up to n samples from
// one array: one allocation for a source's samples of two labels, not
// one each.
type labelPairs struct {
	name string
	buf  []string
}

func newLabelPairs(name string, n int) *labelPairs {
	return &labelPairs{name, make([]string, 0, 2*n)}
}

// with returns the label values name, v.
func (p *labelPairs) with(v string) []string {
	if len(p.buf)+2 > cap(p.buf) {
		p.buf = make([]string, 0, cap(p.buf)+2)
	}
	p.buf = append(p.buf, p.name, v)
	n := len(p.buf)
	return p.buf[n-2 : n : n]
}

// sharedStatser and exactStatser are what the limiters of package sync
// report beyond shardlimit.Limiter.
type (
	sharedStatser interface {
		SharedStats() shardsync.SharedStats
	}
	exactStatser interface {
		ExactStats() shardsync.ExactStats
	}
)

// collectLimiter emits the families of limiter l named name, whose Stats
// are st; denied is the outcome its denials are reported as.
func collectLimiter(emit func(Sample), name string, l shardlimit.Limiter, st shardlimit.Stats, denied string) {
	names := []string{name} // the labels of every sample of one label
	one := func(f *Family, v float64) { emit(Sample{f, names, v}) }
	store := "local"
	var shared *shardsync.SharedStats
	var exact *shardsync.ExactStats
	switch x := l.(type) {
	case sharedStatser:
		store = "shared"
		s := x.SharedStats()
		shared = &s
	case exactStatser:
		store = "exact"
		s := x.ExactStats()
		exact = &s
	}
	cfg := l.Config()
	emit(Sample{limiterInfo, []string{name, cfg.Algorithm.String(), store}, 1})
	one(limit, float64(cfg.Limit))
	one(window, cfg.Window.Seconds())
	pairs := newLabelPairs(name, 2)
	emit(Sample{decisions, pairs.with("allowed"), float64(st.Allowed)})
	emit(Sample{decisions, pairs.with(denied), float64(st.Denied)})
	one(keys, float64(st.Keys))
	one(keysEvicted, float64(st.Evicted))
	one(keysRefused, float64(st.Refused))
	if shared != nil {
		for _, r := range sharedRows {
			one(r.f, r.v(shared))
		}
	}
	if exact != nil {
		for _, r := range exactRows {
			one(r.f, r.v(exact))
		}
	}
}
