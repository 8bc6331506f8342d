package mwengine

import (
	"strconv"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// Field identifies a response header field the middleware writes.
type Field uint8

// The fields, in the order they are written.
const (
	FieldLimit      Field = iota // X-RateLimit-Limit
	FieldRemaining               // X-RateLimit-Remaining
	FieldReset                   // X-RateLimit-Reset
	FieldPolicy                  // RateLimit-Policy (IETF draft)
	FieldRateLimit               // RateLimit (IETF draft)
	FieldWindowMs                // X-RateLimit-Window-Ms
	FieldStrategy                // X-RateLimit-Strategy
	FieldRetryAfter              // Retry-After (RFC 9110, section 10.2.3)
	NumFields
)

// FieldNames are the fields' names in canonical MIME form (how both Go
// frameworks spell them; names are case-insensitive on the wire), indexed by
// Field.
var FieldNames = [NumFields]string{
	FieldLimit:      "X-Ratelimit-Limit",
	FieldRemaining:  "X-Ratelimit-Remaining",
	FieldReset:      "X-Ratelimit-Reset",
	FieldPolicy:     "Ratelimit-Policy",
	FieldRateLimit:  "Ratelimit",
	FieldWindowMs:   "X-Ratelimit-Window-Ms",
	FieldStrategy:   "X-Ratelimit-Strategy",
	FieldRetryAfter: "Retry-After",
}

// CeilSeconds returns d in whole seconds rounded up; 0 for d <= 0.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// RetryAfterSeconds returns the Retry-After value for retry-after d: d in
// whole seconds rounded up and at least 1, and false for shardlimit.Never
// (no wait can succeed: the field is omitted).
func RetryAfterSeconds(d time.Duration) (int64, bool) {
	if d == shardlimit.Never {
		return 0, false
	}
	return max(1, CeilSeconds(d)), true
}

// Fields are the rate-limit fields of one response, formatted by
// Engine.Reply: Len fields, the i-th named FieldNames[Field(i)] with
// value Value(i). The values lie one after the other in Buf, so a
// middleware can copy them all at once (net/http: one string for all).
type Fields struct {
	// Buf holds the values, concatenated. Reply appends to it.
	Buf []byte
	n   int
	f   [NumFields]Field
	end [NumFields]int
}

// Len returns the number of fields.
func (fs *Fields) Len() int { return fs.n }

// Field returns the i-th field, for 0 <= i < Len().
func (fs *Fields) Field(i int) Field { return fs.f[i] }

// End returns where the i-th field's value ends in Buf; it starts where the
// previous one ends (the first at 0).
func (fs *Fields) End(i int) int { return fs.end[i] }

// Value returns the i-th field's value, a slice of Buf.
func (fs *Fields) Value(i int) []byte {
	start := 0
	if i > 0 {
		start = fs.end[i-1]
	}
	return fs.Buf[start:fs.end[i]]
}

// reset empties fs, keeping Buf's capacity.
func (fs *Fields) reset() {
	fs.Buf, fs.n = fs.Buf[:0], 0
}

// add records field f, whose value ends at end.
func (fs *Fields) add(f Field, end int) {
	fs.f[fs.n], fs.end[fs.n] = f, end
	fs.n++
}

// formatFields formats the rate-limit fields of o (those HeaderConfig
// selects; Retry-After only for ActionDeny), in the order of their Field
// values, into fs, appending the values to fs.Buf. fs must be a zero Fields
// but for Buf, which may bring capacity but no content. It formats nothing
// for a decision without a rule.
func (e *Engine) formatFields(fs *Fields, o *Outcome) {
	r := o.r
	if r == nil {
		return
	}
	res := &o.Result
	rt := &r.rates[o.rate] // the rate res reports
	reset := CeilSeconds(res.ResetAfter)
	b := fs.Buf
	if !e.hdr.OmitXRateLimit {
		b = rt.appendLimit(b, res.Limit)
		fs.add(FieldLimit, len(b))
		b = strconv.AppendInt(b, int64(res.Remaining), 10)
		fs.add(FieldRemaining, len(b))
		v := reset
		if e.hdr.ResetUnix {
			// The reset instant R = now + ResetAfter, in Unix seconds
			// rounded up.
			ns := o.Time.UnixNano() + int64(res.ResetAfter)
			v = ns / 1e9
			if ns%1e9 > 0 {
				v++
			}
		}
		b = strconv.AppendInt(b, v, 10)
		fs.add(FieldReset, len(b))
	}
	if e.hdr.IETF {
		// RateLimit-Policy: every rate; RateLimit: the binding rate.
		b = appendPolicies(b, o)
		fs.add(FieldPolicy, len(b))
		b = appendServiceItem(b, rt, res.Remaining, reset)
		fs.add(FieldRateLimit, len(b))
	}
	if e.hdr.Verbose {
		b = append(b, rt.windowMs...)
		fs.add(FieldWindowMs, len(b))
		b = append(b, r.strategy...)
		fs.add(FieldStrategy, len(b))
	}
	if !e.hdr.OmitRetryAfter && (o.Action == httplimit.ActionDeny || o.Action == httplimit.ActionBanned) {
		if s, ok := RetryAfterSeconds(res.RetryAfter); ok {
			b = strconv.AppendInt(b, s, 10)
			fs.add(FieldRetryAfter, len(b))
		}
	}
	fs.Buf = b
}

// appendPolicies appends the RateLimit-Policy value of o (which has a
// rule): every rate of its rule, shortest window first, each with the
// key's limit in it.
func appendPolicies(b []byte, o *Outcome) []byte {
	r := o.r
	for k := range r.rates {
		if k > 0 {
			b = append(b, ", "...)
		}
		lim := r.rates[k].limit
		switch {
		case k == o.rate:
			lim = o.Result.Limit
		case o.own:
			lim = o.lims[k]
		}
		b = r.rates[k].appendPolicy(b, lim)
	}
	return b
}

// appendPolicyItem appends rt's RateLimit-Policy item for a quota of limit
// units: "name";q=limit;w=window seconds.
func appendPolicyItem(dst []byte, rt *rate, limit int) []byte {
	dst = append(dst, rt.sfName...)
	dst = append(dst, ";q="...)
	dst = strconv.AppendInt(dst, int64(limit), 10)
	return append(dst, rt.policyW...)
}

// appendPolicy appends rt's RateLimit-Policy item for a quota of limit
// units, the preformatted one for rt's default limit.
func (rt *rate) appendPolicy(dst []byte, limit int) []byte {
	if limit == rt.limit {
		return append(dst, rt.policy...)
	}
	return appendPolicyItem(dst, rt, limit)
}

// appendServiceItem appends rt's RateLimit item: "name";r=remaining;t=reset.
func appendServiceItem(dst []byte, rt *rate, remaining int, reset int64) []byte {
	dst = append(dst, rt.sfName...)
	dst = append(dst, ";r="...)
	dst = strconv.AppendInt(dst, int64(remaining), 10)
	dst = append(dst, ";t="...)
	return strconv.AppendInt(dst, reset, 10)
}

// appendLimit appends limit in decimal, rt's default one without
// formatting.
func (rt *rate) appendLimit(dst []byte, limit int) []byte {
	if limit == rt.limit {
		return append(dst, rt.limitDigits...)
	}
	return strconv.AppendInt(dst, int64(limit), 10)
}

// appendSFString appends s as a structured-field string (RFC 9651, section
// 3.3.3): quoted, with '"' and '\' escaped. s is printable ASCII.
func appendSFString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			dst = append(dst, '\\')
		}
		dst = append(dst, s[i])
	}
	return append(dst, '"')
}

// appendWindow appends a human-readable window: whole seconds, else whole
// milliseconds, else nanoseconds.
func appendWindow(dst []byte, w time.Duration) []byte {
	switch {
	case w%time.Second == 0:
		return append(strconv.AppendInt(dst, int64(w/time.Second), 10), " s"...)
	case w%time.Millisecond == 0:
		return append(strconv.AppendInt(dst, int64(w/time.Millisecond), 10), " ms"...)
	}
	return append(strconv.AppendInt(dst, int64(w), 10), " ns"...)
}

// Response bodies (text/plain; charset=utf-8) of the answers other than 429.
const (
	// BodyBadCost is the 500 body for a negative request cost.
	BodyBadCost = "Internal Server Error: invalid request cost.\n"
	// BodyNoIdentity is the 400 body for a request without a client
	// identity (or with an unlisted one under UnknownIdentityAnonymous)
	// under EmptyKeyReject.
	BodyNoIdentity = "Bad Request: missing or unknown client identity.\n"
	// BodyUnavailable is the 503 body for a failed decision under
	// FailClosed.
	BodyUnavailable = "Service Unavailable: rate limiter unavailable.\n"
)

// The bodies as written (never modified).
var (
	bodyBadCost     = []byte(BodyBadCost)
	bodyNoIdentity  = []byte(BodyNoIdentity)
	bodyUnavailable = []byte(BodyUnavailable)
)

// ContentType is the Content-Type of every body the middleware writes; each
// is sent with X-Content-Type-Options: nosniff (NoSniff).
const (
	ContentType = "text/plain; charset=utf-8"
	NoSniff     = "nosniff"
)

// Statuses of the answers the middleware writes itself.
const (
	StatusTooManyRequests     = 429
	StatusBadRequest          = 400
	StatusInternalServerError = 500
	StatusServiceUnavailable  = 503
)

// Reply is how a middleware answers a decided request: the one mapping from
// Action to response, so that both adapters only read requests and write
// responses.
type Reply struct {
	// Next: write the fields and call the next handler.
	Next bool
	// Hook: a 429 that the middleware's Denied hook answers, after the
	// fields are written.
	Hook bool
	// Status and Body, when neither: write the fields, then answer Status
	// with Body, Content-Type ContentType and X-Content-Type-Options
	// NoSniff. Body is sc.Body or a constant; it must not be modified.
	Status int
	Body   []byte
}

// Reply returns the answer to the request o decided and formats it into sc:
// the rate-limit fields into sc.Fields and a 429's body into sc.Body.
// hook tells whether the middleware has a Denied hook, which then answers
// 429s instead. A failed decision answered here (ActionFailClosed, after
// the error hook) gives back its in-flight slot (Outcome.InFlight).
func (e *Engine) Reply(sc *Scratch, o *Outcome, hook bool) Reply {
	sc.Fields.reset()
	if o.Action != httplimit.ActionAllow { // the allowed path skips the switch
		if rp, ok := e.answer(sc, o, hook); ok {
			return rp
		}
	}
	e.formatFields(&sc.Fields, o) // nothing without a rule
	return Reply{Next: true}
}

// answer returns Reply's answer to a request o decided that does not go
// to the next handler (ok), formatting its fields and body into sc; ok is
// false for a request that does.
func (e *Engine) answer(sc *Scratch, o *Outcome, hook bool) (rp Reply, ok bool) {
	switch o.Action {
	case httplimit.ActionBadCost:
		return Reply{Status: StatusInternalServerError, Body: bodyBadCost}, true
	case httplimit.ActionNoIdentity:
		return Reply{Status: StatusBadRequest, Body: bodyNoIdentity}, true
	case httplimit.ActionFailClosed:
		e.Release(o.InFlight)
		o.InFlight = InFlight{}
		return failReply(sc, o), true
	case httplimit.ActionDenyListed:
		return Reply{Status: StatusForbidden, Body: bodyDenyListed}, true
	case httplimit.ActionDeny:
		e.formatFields(&sc.Fields, o)
		if hook {
			return Reply{Hook: true}, true
		}
		sc.Body = AppendDenyBody(sc.Body[:0], o)
		return Reply{Status: StatusTooManyRequests, Body: sc.Body}, true
	case httplimit.ActionBanned, httplimit.ActionTooManyInFlight:
		return e.policyReply(sc, o, hook), true
	}
	return Reply{}, false
}

// AppendDenyBody appends the text/plain body of a 429 for d to dst, e.g.
// "Too Many Requests: limit of 10 per 60 s reached; retry in 57 s.\n".
func AppendDenyBody(dst []byte, d *Outcome) []byte {
	res := &d.Result
	dst = append(dst, "Too Many Requests: "...)
	switch {
	case res.RetryAfter != shardlimit.Never:
		s, _ := RetryAfterSeconds(res.RetryAfter)
		dst = append(dst, "limit of "...)
		dst = strconv.AppendInt(dst, int64(res.Limit), 10)
		dst = append(dst, " per "...)
		dst = appendWindow(dst, d.Window)
		dst = append(dst, " reached; retry in "...)
		dst = strconv.AppendInt(dst, s, 10)
		dst = append(dst, " s.\n"...)
	case res.Limit == 0:
		dst = append(dst, "this client may make no requests here.\n"...)
	default:
		dst = append(dst, "request cost "...)
		dst = strconv.AppendInt(dst, int64(d.Cost), 10)
		dst = append(dst, " exceeds the limit of "...)
		dst = strconv.AppendInt(dst, int64(res.Limit), 10)
		dst = append(dst, " per "...)
		dst = appendWindow(dst, d.Window)
		dst = append(dst, ".\n"...)
	}
	return dst
}
