package httpmw

import (
	"net/http"

	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwengine"
)

// outcomeWriter is the ResponseWriter a handler gets for a request to be
// settled after it (see "Settling after the handler" in package
// httplimit): it records the response's status and takes the rule's cost
// header out of the header before the header is written. It implements
// http.Flusher and Unwrap, so http.ResponseController reaches every
// feature of the writer it wraps (Hijack, SetReadDeadline...).
type outcomeWriter struct {
	http.ResponseWriter
	costHeader string // canonical; "" if the rule has none
	cost       string // the cost header's last value taken
	status     int    // the final status written; 0 before
}

// take moves the cost header's value, if any, from the header to w.cost.
func (w *outcomeWriter) take() {
	if w.costHeader == "" {
		return
	}
	h := w.ResponseWriter.Header()
	if vs := h[w.costHeader]; len(vs) > 0 {
		w.cost = vs[0]
		delete(h, w.costHeader)
	}
}

// WriteHeader implements http.ResponseWriter. Informational statuses (1xx
// but 101) are passed on without being recorded, as net/http allows
// several before the final one.
func (w *outcomeWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.take()
		if code >= 200 || code == http.StatusSwitchingProtocols {
			w.status = code
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write implements http.ResponseWriter.
func (w *outcomeWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.take()
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush implements http.Flusher, through http.ResponseController so that a
// wrapped writer that flushes only through Unwrap flushes too.
func (w *outcomeWriter) Flush() {
	if w.status == 0 {
		w.take()
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (w *outcomeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// serveSettled serves the admitted request r, decided into o with sc, to
// next and settles it once next returns (mwengine.Engine.Settle): a
// handler that panics (http.ErrAbortHandler included) is settled as a
// response of status 500 without a reported cost, and its panic goes on
// to the server untouched (not recovered and re-raised: its stack stays
// the handler's). The request's in-flight slot, if any, is given back
// once it is settled.
func (m *Middleware) serveSettled(w http.ResponseWriter, r *http.Request, next http.Handler, sc *mwengine.Scratch, o *mwengine.Outcome) {
	defer m.e.Release(o.InFlight) // after the settlement, by a panic too
	ow := &outcomeWriter{ResponseWriter: w, costHeader: o.CostHeader()}
	returned := false
	defer func() {
		if !returned {
			m.e.Settle(sc, o, http.StatusInternalServerError, mwengine.NoCost)
			m.e.PutScratch(sc)
		}
	}()
	next.ServeHTTP(ow, r)
	returned = true
	ow.take() // a cost set after the header was written
	status := ow.status
	if status == 0 {
		status = http.StatusOK // what net/http sends for a handler that wrote nothing
	}
	cost := mwengine.NoCost
	if ow.costHeader != "" {
		cost = mwengine.ParseCost(ow.cost)
	}
	if cost == mwengine.NoCost && m.finalCost != nil {
		cost = mwengine.CheckCost(m.finalCost(r, status, w.Header(), o.Decision))
	}
	m.e.Settle(sc, o, status, cost)
	m.e.PutScratch(sc)
}

// finalCostHook is Config.FinalCost's type.
type finalCostHook = func(r *http.Request, status int, h http.Header, d httplimit.Decision) int

// setFinalCost installs Config.FinalCost f, if not nil: every rule's
// decisions are then settled after the handler.
func (m *Middleware) setFinalCost(f finalCostHook) {
	if f == nil {
		return
	}
	m.e.EnableCostHook()
	m.finalCost = f
}
