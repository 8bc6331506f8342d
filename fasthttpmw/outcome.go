package fasthttpmw

import (
	"github.com/valyala/fasthttp"

	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwengine"
)

// setFinalCost installs Config.FinalCost f, if not nil: every rule's
// decisions are then settled after the handler.
func (m *Middleware) setFinalCost(f func(*fasthttp.RequestCtx, httplimit.Decision) int) {
	if f == nil {
		return
	}
	m.e.EnableCostHook()
	m.finalCost = f
}

// serveSettled serves the admitted request of ctx, decided into o with
// sc, to next and settles it once next returns (mwengine.Engine.Settle),
// from the response's status and the rule's cost header, which it removes
// from the response. A handler that panics is settled as a response of
// status 500 without a reported cost, and its panic goes on untouched
// (not recovered and re-raised). The request's in-flight slot, if any,
// is given back once it is settled. A body stream writer
// (RequestCtx.SetBodyStreamWriter) runs after the handler returns, so
// after the settlement: the cost must be known when the handler returns.
func (m *Middleware) serveSettled(ctx *fasthttp.RequestCtx, next fasthttp.RequestHandler, sc *mwengine.Scratch, o *mwengine.Outcome) {
	defer m.e.Release(o.InFlight) // after the settlement, by a panic too
	returned := false
	defer func() {
		if !returned {
			m.e.Settle(sc, o, fasthttp.StatusInternalServerError, mwengine.NoCost)
			m.e.PutScratch(sc)
		}
	}()
	next(ctx)
	returned = true
	cost := mwengine.NoCost
	if name := o.CostHeader(); name != "" {
		h := &ctx.Response.Header
		cost = mwengine.ParseCost(h.Peek(name))
		h.Del(name)
	}
	if cost == mwengine.NoCost && m.finalCost != nil {
		cost = mwengine.CheckCost(m.finalCost(ctx, o.Decision))
	}
	m.e.Settle(sc, o, ctx.Response.StatusCode(), cost)
	m.e.PutScratch(sc)
}
