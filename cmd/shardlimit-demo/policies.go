package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shardlimit/shardlimit/fasthttpmw"
	"github.com/shardlimit/shardlimit/httplimit"
	shardsync "github.com/shardlimit/shardlimit/sync"
)

// maxReportDelay bounds /report's ?ms=.
const maxReportDelay = 10 * time.Second

// policyApp answers /login and /report; /report waits ?ms= milliseconds
// first (at most maxReportDelay), a slow request to see the concurrency
// cap with.
func policyApp(ctx *fasthttp.RequestCtx) {
	if string(ctx.Path()) == "/login" {
		ctx.SetBodyString("login: ok\n")
		return
	}
	if ms, err := ctx.QueryArgs().GetUint("ms"); err == nil && ms > 0 {
		time.Sleep(min(time.Duration(ms)*time.Millisecond, maxReportDelay))
	}
	ctx.SetBodyString("report: ok\n")
}

// shareBans makes o share its bans through Redis, under the demo's
// prefix, read every flush interval.
func (sh *redisSync) shareBans(o *httplimit.Options) error {
	store, err := shardsync.NewBanStore(sh.client, sh.prefix)
	if err != nil {
		return err
	}
	o.BanStore, o.BanSyncInterval = store, sh.flush
	return nil
}

// writeBans writes the bans in force and the counters of bans and
// concurrency caps.
func writeBans(w io.Writer, mw *fasthttpmw.Middleware) {
	st := mw.PolicyStats()
	fmt.Fprintf(w, "\nbans: %d started, %d requests refused while banned; %d requests over a concurrency cap\n",
		st.BansStarted, st.Banned, st.InFlightRefused)
	if st.ViolationsUntracked+st.BanTableFull+st.InFlightTableFull+st.StoreErrors+st.StoreDropped > 0 {
		fmt.Fprintf(w, "full tables: %d violations untracked, %d bans not stored, %d requests refused; store: %d errors, %d dropped\n",
			st.ViolationsUntracked, st.BanTableFull, st.InFlightTableFull, st.StoreErrors, st.StoreDropped)
	}
	for _, r := range mw.RuleStats() {
		if b := r.Ban; b != nil {
			fmt.Fprintf(w, "%s: bans a client denied %d times within %v for %v", r.Name, b.After, b.Within, b.For)
			if b.Growth > 1 {
				fmt.Fprintf(w, ", x%g at each repeat up to %v", b.Growth, b.MaxLength())
			}
			fmt.Fprintln(w)
		}
		if c := r.Concurrency; c != nil {
			fmt.Fprintf(w, "%s: at most %d requests in flight per client (%d, Retry-After %v)\n",
				r.Name, c.Limit, c.StatusCode(), c.RetryAfterOrDefault())
		}
	}
	bans := mw.Bans()
	if len(bans) == 0 {
		fmt.Fprintln(w, "no ban in force")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tKEY\tREMAINING\tOFFENCES")
	for _, b := range bans {
		fmt.Fprintf(tw, "%s\t%s\t%v\t%d\n", b.Rule, printable(b.Key), b.Remaining.Round(time.Second), b.Offences)
	}
	tw.Flush()
}
