package metrics

import (
	"cmp"
	"math"
	"reflect"
	"slices"
	gosync "sync"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// Option configures the Source that Middleware returns.
type Option func(*middlewareConfig)

type middlewareConfig struct {
	group func(r httplimit.RuleStats) string
}

// WithGroup returns an Option that bounds a middleware's series whatever
// its rule count: group(r) names the group of rule r, and the rules of one
// group are reported as one source labelled limiter=<group>: at most 54
// series per group (see the package doc for the exact counts), however
// many rules each holds. A group of "" keeps the rule's own series, under
// its own name, which must then differ from every group's (WriteText
// refuses two series of one name). A nil group keeps every rule's own
// series, as Middleware without options does. AllRules and ByTier are
// ready-made groupings.
//
// A group's series are its members' summed: decisions, errors, keys,
// evictions, refusals and the store's flushes, items, units and calls.
// Families that describe the store rather than the rule take the worst
// member instead, since a middleware's rules usually share one store
// client, whose state each of them reports: store_healthy the least,
// store_evicting, store_evicted_keys_total, store_trips_total,
// store_recoveries_total, store_policy_share and the flush durations and
// gap the greatest, shared_clock_offset_seconds the greatest in magnitude.
// shardlimit_limit and shardlimit_window_seconds are reported only while
// every member has the same value (a group of rules with different limits
// has no one limit); shardlimit_limiter_info is 1 for each algorithm and
// store among the members; shardlimit_group_rules counts the members.
//
// Counters never go down while their group has members, even when a
// reload removes a rule, replaces its limiter (whose counts start again
// at 0) or moves it to another group: the group carries what the members
// it lost had counted at the last collection before they left, and a
// member that joins adds its whole count, except a rule that comes back
// with the limiter it left with (a reload that restores a rule within its
// window keeps its limiter), whose count already holds what was carried.
// Counts a departing member made after that last collection are not
// seen. A group that loses every member disappears, with what it carried;
// should it come back, its counters start again from its members' counts,
// which Prometheus reads as a counter reset.
//
// group is called once per rule at each collection, with the Source's
// lock held (collections of one grouped Source take turns): it should be
// quick, and must not collect the Source itself.
func WithGroup(group func(r httplimit.RuleStats) string) Option {
	return func(c *middlewareConfig) { c.group = group }
}

// AllRulesGroup is the group AllRules puts every rule in: the value of
// the limiter label of a middleware's series under WithGroup(AllRules).
const AllRulesGroup = "all"

// AllRules is a grouping for WithGroup: every rule in one group named
// AllRulesGroup, so the middleware emits one series set (at most 54
// series) whatever its rule count.
func AllRules(httplimit.RuleStats) string { return AllRulesGroup }

// ByTier is a grouping for WithGroup: one group per client tier, named
// "tier:" and the tier's name, and one named "default" for the default
// rules (those of no tier).
func ByTier(r httplimit.RuleStats) string {
	if r.Tier == "" {
		return "default"
	}
	return "tier:" + r.Tier
}

// aggregate is how a group combines its members' values of one family.
type aggregate int

const (
	aggSum    aggregate = iota // the members' sum
	aggMin                     // the least
	aggMax                     // the greatest
	aggMaxAbs                  // the greatest in magnitude
	aggSame                    // the members' one value, none if they differ
	aggOne                     // 1 (info families)
)

// groupAggregates gives, by family name, how a group combines the
// members' values of the families not summed.
var groupAggregates = map[string]aggregate{
	"shardlimit_limiter_info":                      aggOne,
	"shardlimit_limit":                             aggSame,
	"shardlimit_window_seconds":                    aggSame,
	"shardlimit_store_healthy":                     aggMin,
	"shardlimit_store_evicting":                    aggMax,
	"shardlimit_store_evicted_keys_total":          aggMax,
	"shardlimit_store_trips_total":                 aggMax,
	"shardlimit_store_recoveries_total":            aggMax,
	"shardlimit_store_policy_share":                aggMax,
	"shardlimit_shared_flush_duration_seconds":     aggMax,
	"shardlimit_shared_flush_duration_max_seconds": aggMax,
	"shardlimit_shared_flush_gap_max_seconds":      aggMax,
	"shardlimit_shared_clock_offset_seconds":       aggMaxAbs,
}

// groupSeries is one series of a group at one collection.
type groupSeries struct {
	f       *Family
	agg     aggregate     // groupAggregates of f
	labels  []string      // labels[0] is the group
	value   float64       // the members' values combined
	differ  bool          // aggSame: two members differ
	counter bool          // a counter: it keeps state between collections
	members []memberValue // summed counters: each member's value, by rule name
}

// ruleRef is a rule read at one collection: its name and limiter.
type ruleRef struct {
	name string
	lim  shardlimit.Limiter
}

// memberValue is a member rule's value of a summed counter series: rule
// is the rule's index in its collection's rules (groupRound.rules).
type memberValue struct {
	rule int32
	v    float64
}

// member is a member rule's value of a counter series, and its limiter.
type member struct {
	v   float64
	lim shardlimit.Limiter
}

// groupRound gathers the series of every group at one collection, in the
// order they were first seen.
type groupRound struct {
	byKey  map[seriesID]*groupSeries
	order  []*groupSeries
	groups map[string]int // members by group
	rules  []ruleRef      // the member rules, by name
	// prev is each counter series' state from earlier collections: its
	// member count sizes the series' members.
	prev map[seriesID]*counterState
}

// seriesID names a group's series: its family, the group and the values
// of the family's labels after limiter (no family has more than two).
type seriesID struct {
	f             *Family
	group, l1, l2 string
}

// idOf returns the seriesID of sample s of a member of group.
func idOf(group string, s Sample) seriesID {
	id := seriesID{f: s.Family, group: group}
	if len(s.Labels) > 1 {
		id.l1 = s.Labels[1]
	}
	if len(s.Labels) > 2 {
		id.l2 = s.Labels[2]
	}
	return id
}

// add folds sample s of member rule g.rules[rule] into its group's
// series. Members are added in rule name order.
func (g *groupRound) add(group string, rule int32, s Sample) {
	key := idOf(group, s)
	gs := g.byKey[key]
	if gs == nil {
		labels := append([]string{group}, s.Labels[1:]...)
		gs = &groupSeries{f: s.Family, agg: groupAggregates[s.Family.Name], labels: labels, value: s.Value,
			counter: s.Family.Type == Counter}
		if gs.counter && gs.agg == aggSum {
			n := 0
			if st := g.prev[key]; st != nil {
				n = len(st.last)
			}
			gs.members = make([]memberValue, 0, n)
		}
		g.byKey[key] = gs
		g.order = append(g.order, gs)
	} else {
		gs.fold(s.Value)
	}
	if gs.counter && gs.agg == aggSum {
		gs.members = append(gs.members, memberValue{rule, s.Value})
	}
}

// fold combines v into a series that already holds a member's value.
func (gs *groupSeries) fold(v float64) {
	switch gs.agg {
	case aggSum:
		gs.value += v
	case aggMin:
		gs.value = math.Min(gs.value, v)
	case aggMax:
		gs.value = math.Max(gs.value, v)
	case aggMaxAbs:
		if math.Abs(v) > math.Abs(gs.value) {
			gs.value = v
		}
	case aggSame:
		gs.differ = gs.differ || v != gs.value
	}
}

// counterState is what a group's counter series keeps between
// collections to stay monotonic.
type counterState struct {
	carried   float64           // counted by members since gone
	last      []memberValue     // each member at the last collection (summed counters)
	lastRules []ruleRef         // the rules of last's indexes
	gone      map[string]member // each member gone (or replaced) since, by rule
	reported  float64           // the value last reported
}

// maxGone bounds counterState.gone: past it the records are dropped, and
// a rule that comes back with the limiter it left with is then counted
// twice (never less).
const maxGone = 1024

// groupSource is the Source of a middleware whose rules are grouped.
type groupSource struct {
	m     HTTPMiddleware
	group func(httplimit.RuleStats) string

	mu       gosync.Mutex
	counters map[seriesID]*counterState
}

// collect reads the rules and settles the groups under s.mu, so that
// collections see the members' counts in the order they were read, and
// emits after.
func (s *groupSource) collect(emit func(Sample)) {
	var out []Sample
	keep := func(smp Sample) { out = append(out, smp) }
	s.mu.Lock()
	rules := s.m.RuleStats()
	byName := func(a, b httplimit.RuleStats) int { return cmp.Compare(a.Name, b.Name) }
	if !slices.IsSortedFunc(rules, byName) { // members are merged by name
		rules = slices.Clone(rules)
		slices.SortFunc(rules, byName)
	}
	round := &groupRound{byKey: map[seriesID]*groupSeries{}, groups: map[string]int{}, prev: s.counters}
	for _, r := range rules {
		g := s.group(r)
		if g == "" {
			collectRule(keep, r)
			continue
		}
		round.groups[g]++
		i := int32(len(round.rules))
		round.rules = append(round.rules, ruleRef{r.Name, r.Limiter})
		collectRule(func(smp Sample) { round.add(g, i, smp) }, r)
	}
	s.settle(keep, round)
	s.mu.Unlock()
	for _, smp := range out {
		emit(smp)
	}
}

// settle emits a round's series, counters carried so that they never go
// down, and keeps what the next round needs. Requires s.mu held.
func (s *groupSource) settle(emit func(Sample), round *groupRound) {
	next := make(map[seriesID]*counterState, len(s.counters))
	for key, gs := range round.byKey {
		if gs.counter {
			st := s.counters[key]
			if st == nil {
				st = &counterState{}
			}
			gs.value = st.advance(gs, round.rules)
			next[key] = st
		}
	}
	s.counters = next
	for g, n := range round.groups {
		emit(Sample{groupRules, []string{g}, float64(n)})
	}
	for _, gs := range round.order {
		if gs.agg == aggOne {
			gs.value = 1
		}
		if !gs.differ {
			emit(Sample{gs.f, gs.labels, gs.value})
		}
	}
}

// advance returns the value of counter series gs at this collection:
// for a summed counter what the members count now plus what members that
// left, were replaced or went down had counted; for the others the
// members' greatest; never less than the value last reported.
func (st *counterState) advance(gs *groupSeries, rules []ruleRef) float64 {
	v := gs.value
	if gs.agg == aggSum {
		st.settleMembers(gs.members, rules)
		v += st.carried
	}
	v = math.Max(v, st.reported)
	st.last, st.lastRules, st.reported = gs.members, rules, v
	return v
}

// settleMembers updates what the series carries from the members it had
// at the last collection to those it has now: a member that left, whose
// limiter was replaced or whose count went down is carried (and
// remembered in gone); one that comes back with the limiter it was
// remembered with, counting at least as much as then, counts that again
// itself, so the record is taken back from what is carried.
// now's values are of rules, and both now and st.last are in rule name
// order.
func (st *counterState) settleMembers(now []memberValue, rules []ruleRef) {
	kept := func(old, cur memberPair) bool {
		if !old.ok || !cur.ok {
			return false
		}
		same, _ := sameLimiter(old.lim, cur.lim)
		return same && cur.v >= old.v
	}
	st.walk(now, rules, func(rule string, old, cur memberPair) {
		if g, ok := st.gone[rule]; ok && cur.ok && !kept(old, cur) {
			if same, sure := sameLimiter(g.lim, cur.lim); same && sure && cur.v >= g.v {
				st.carried -= g.v
				delete(st.gone, rule)
			}
		}
	})
	st.walk(now, rules, func(rule string, old, cur memberPair) {
		if !old.ok || kept(old, cur) {
			return
		}
		st.carried += old.v
		if st.gone == nil || len(st.gone) >= maxGone {
			st.gone = map[string]member{}
		}
		st.gone[rule] = old.member
	})
}

// memberPair is a rule's member value at one collection, if ok.
type memberPair struct {
	member
	ok bool
}

// walk calls f for every rule of st.last or now, in name order, with its
// value at the last collection and now (a merge of the two sorted lists).
func (st *counterState) walk(now []memberValue, rules []ruleRef, f func(rule string, old, cur memberPair)) {
	last, lastRules := st.last, st.lastRules
	for i, j := 0, 0; i < len(last) || j < len(now); {
		var old, cur memberPair
		var name string
		c := 0
		switch {
		case i == len(last):
			c = 1
		case j == len(now):
			c = -1
		default:
			c = cmp.Compare(lastRules[last[i].rule].name, rules[now[j].rule].name)
		}
		if c <= 0 {
			r := lastRules[last[i].rule]
			old, name = memberPair{member{last[i].v, r.lim}, true}, r.name
			i++
		}
		if c >= 0 {
			r := rules[now[j].rule]
			cur, name = memberPair{member{now[j].v, r.lim}, true}, r.name
			j++
		}
		f(name, old, cur)
	}
}

// sameLimiter reports whether a and b are one limiter, and whether that
// is sure: limiters of one type that cannot be compared are taken as the
// same, not surely (a changed limiter is then seen only if its counts go
// down).
func sameLimiter(a, b shardlimit.Limiter) (same, sure bool) {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	if ta != tb {
		return false, true
	}
	if ta == nil || !ta.Comparable() {
		return true, ta == nil
	}
	return a == b, true
}
