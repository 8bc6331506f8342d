package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shardlimit/shardlimit/fasthttpmw"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/metrics"
	shardsync "github.com/shardlimit/shardlimit/sync"
)

// topShown is how many of the most-denied keys the status page lists.
const topShown = 20

// metricsGroupings are the values of -metrics-group: how /metrics
// reports the rules.
var metricsGroupings = map[string]func(httplimit.RuleStats) string{
	"rule": nil, // one series set per rule
	"all":  metrics.AllRules,
	"tier": metrics.ByTier,
}

// metricsGrouping returns the grouping -metrics-group names, or an error.
func metricsGrouping(name string) (func(httplimit.RuleStats) string, error) {
	g, ok := metricsGroupings[name]
	if !ok {
		return nil, fmt.Errorf("-metrics-group %q: want rule, all or tier", name)
	}
	return g, nil
}

// observe returns the handlers of /metrics, which holds no client key,
// and /status, which lists the most-denied clients by address and
// identity, for mw, whose counters are described by counters ("in
// memory", or where Redis is); /metrics groups the rules by group (nil:
// one series set per rule).
func observe(mw *fasthttpmw.Middleware, counters string, group func(httplimit.RuleStats) string) (metricsHandler, statusHandler fasthttp.RequestHandler) {
	src := metrics.Middleware(mw, metrics.WithGroup(group)) // one, since a grouped source keeps state
	metricsHandler = func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType(metrics.TextContentType)
		if err := metrics.WriteText(ctx, src); err != nil {
			ctx.Error(err.Error(), fasthttp.StatusInternalServerError)
		}
	}
	statusHandler = func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/plain; charset=utf-8")
		writeStatus(ctx, mw, counters)
	}
	return metricsHandler, statusHandler
}

// writeStatus writes the human-readable status page: the rules in force
// with their limits and counters, the state of the Redis store if any,
// and the most-denied clients.
func writeStatus(w io.Writer, mw *fasthttpmw.Middleware, counters string) {
	rules := mw.RuleStats()
	st := mw.Stats()
	fmt.Fprintf(w, "shardlimit-demo: %d rules, counters %s\n", st.Rules, counters)
	fmt.Fprintf(w, "requests: %d allowed, %d denied (%d let through by dry run), %d errors, %d bad costs, %d without identity\n",
		st.Allowed, st.Denied, st.WouldDeny, st.Errors, st.BadCost, st.NoIdentity)
	fmt.Fprintf(w, "lists: %d exempt (passed uncounted), %d refused by a deny list (403); shadow rules: %d allowed, %d would deny\n\n",
		st.Exempt, st.DenyListed, st.ShadowAllowed, st.ShadowWouldDeny)

	writeRules(w, rules, false)
	if slices.ContainsFunc(rules, func(r httplimit.RuleStats) bool { return r.Shadow }) {
		fmt.Fprintln(w, "\nshadow rules (they decide and count the requests of their route, but answer none: WOULD DENY is what they would have refused; compare with the enforced rule of the route before switching):")
		writeRules(w, rules, true)
	}
	writeSettled(w, rules)

	var store []string
	for _, r := range rules {
		switch l := r.Limiter.(type) {
		case *shardsync.Shared:
			s := l.SharedStats()
			store = append(store, fmt.Sprintf("%s\tshared\t%s\t%d flushes (%d failed), last %v, longest gap %v; units sent %d, retried %d, unknown %d, dropped %d; %d keys pending; %.0f%% of %d items failed in the last health interval",
				r.Name, s.State, s.Flushes, s.FailedFlushes, s.LastLatency.Round(time.Microsecond), s.MaxFlushGap.Round(time.Millisecond),
				s.SentUnits, s.RetriedUnits, s.UnknownUnits, s.DroppedUnits, s.Pending, 100*s.PolicyShare, s.RecentItems))
		case *shardsync.Exact:
			s := l.ExactStats()
			store = append(store, fmt.Sprintf("%s\texact\t%s\t%d calls (%d errors, %d timeouts), %d decided by the failure policy; %.0f%% of %d decisions by it in the last health interval",
				r.Name, s.State, s.Calls, s.Errors, s.Timeouts, s.PolicyDecisions, 100*s.PolicyShare, s.RecentDecisions))
		}
	}
	if len(store) > 0 {
		fmt.Fprintln(w, "\nstore (Redis):")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "RULE\tMODE\tSTATE\tCOUNTERS")
		for _, line := range store {
			fmt.Fprintln(tw, line)
		}
		tw.Flush()
	}

	writeBans(w, mw)

	top, total := mw.TopDenied(0)
	more := max(len(top)-topShown, 0)
	top = top[:len(top)-more]
	fmt.Fprintf(w, "\nmost denied clients (%d denials in all; only those certainly denied more often than any not listed; each was denied at least GUARANTEED times, at most DENIED = GUARANTEED + ERROR):\n", total)
	if len(top) == 0 {
		if total == 0 {
			fmt.Fprintln(w, "none")
		} else {
			fmt.Fprintln(w, "none certain: the denials are spread over more clients than the summary tracks")
		}
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tKEY\tGUARANTEED\tDENIED\tERROR")
	for _, d := range top {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", d.Rule, printable(d.Key), d.Guaranteed(), d.Count, d.Error)
	}
	tw.Flush()
	writeTopCut(w, len(top), more)
}

// writeRules writes the table of the enforced rules, or of the shadow
// rules if shadow: limits and counters, then what the rule's own exempt
// and deny lists did.
func writeRules(w io.Writer, rules []httplimit.RuleStats, shadow bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	denied := "DENIED"
	if shadow {
		denied = "WOULD DENY"
	}
	fmt.Fprintf(tw, "RULE\tTIER\tROUTE\tALGORITHM\tLIMIT\tALLOWED\t%s\tKEYS\tEVICTED\tREFUSED\tERRORS\tEXEMPT\tDENY-LISTED\n", denied)
	for _, r := range rules {
		if r.Shadow != shadow {
			continue
		}
		route := r.Path
		if r.Prefix {
			route += "*"
		}
		if len(r.Methods) > 0 {
			route = strings.Join(r.Methods, ",") + " " + route
		}
		errs := r.Errors.TooManyKeys + r.Errors.Invalid + r.Errors.Closed + r.Errors.Other + r.BadCost + r.NoIdentity
		limits := fmt.Sprintf("%d/%s", r.Limit, window(r.Window))
		if len(r.Limits) > 1 {
			var ls []string
			for _, l := range r.Limits {
				ls = append(ls, fmt.Sprintf("%d/%s", l.Limit, window(l.Window)))
			}
			limits = strings.Join(ls, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n",
			r.Name, dash(r.Tier), route, r.Algorithm, limits,
			r.Stats.Allowed, r.Stats.Denied, r.Stats.Keys, r.Stats.Evicted, r.Stats.Refused, errs, r.Exempt, r.DenyListed)
	}
	tw.Flush()
}

// window formats a rule's window: "1m" rather than "1m0s".
func window(d time.Duration) string {
	s := d.String()
	for _, z := range []string{"m0s", "h0m"} {
		s = strings.Replace(s, z, z[:1], 1)
	}
	return s
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printable returns key as is if it is printable ASCII without spaces,
// else quoted: a client identity is whatever the client sent.
func printable(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] <= ' ' || key[i] >= 0x7f {
			return strconv.Quote(key)
		}
	}
	return key
}

// writeTopCut says, when the most-denied list was cut at shown rows with
// more left off, how many and what the rows shown still promise: they are
// the listed clients of greatest guaranteed count, each certainly denied
// more often than any client outside the full list, but not necessarily
// more often than those left off.
func writeTopCut(w io.Writer, shown, more int) {
	if more == 0 {
		return
	}
	fmt.Fprintf(w, "and %d more: the %d shown have the greatest guaranteed counts of the %d listed, each certainly denied more often than any client not among the %d, not necessarily more than the %d not shown\n",
		more, shown, shown+more, shown+more, more)
}

// writeSettled writes, if any rule settles its requests after the handler
// (httplimit.RuleStats.Settles), what each such rule settled.
func writeSettled(w io.Writer, rules []httplimit.RuleStats) {
	var tw *tabwriter.Writer
	for _, r := range rules {
		if !r.Settles {
			continue
		}
		if tw == nil {
			fmt.Fprintln(w, "\nsettled after the handler:")
			tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "RULE\tCOUNT\tCOST HEADER\tREFUNDED\tCHARGED\tBAD REPORTS\tREFUSED")
		}
		count := string(r.Count)
		if count == "" {
			count = string(httplimit.CountAll)
		}
		s := r.Settled
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\n", r.Name, count, dash(r.CostHeader), s.Refunded, s.Charged, s.BadReports, s.Errors)
	}
	if tw != nil {
		tw.Flush()
	}
}
