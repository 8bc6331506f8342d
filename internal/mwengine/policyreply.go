package mwengine

import (
	"strconv"

	"github.com/shardlimit/shardlimit/httplimit"
)

// policyReply is Reply for a request refused by a ban (429 with the
// rate-limit fields, Remaining 0, and Retry-After the later of the ban's
// end and the limiter's wait (see banned); the
// Denied hook answers it if there is one) or by a concurrency limit (the
// rule's status with Retry-After alone: the limiter was not asked, so
// there is no rate to report; never the Denied hook, whose answer is a
// 429).
func (e *Engine) policyReply(sc *Scratch, o *Outcome, hook bool) Reply {
	if o.Action == httplimit.ActionBanned {
		e.formatFields(&sc.Fields, o)
		if hook {
			return Reply{Hook: true}
		}
		b := append(sc.Body[:0], "Too Many Requests: banned here after repeated violations of the limit; "...)
		if s, ok := RetryAfterSeconds(o.Result.RetryAfter); ok {
			b = append(b, "retry in "...)
			b = strconv.AppendInt(b, s, 10)
			sc.Body = append(b, " s.\n"...)
		} else {
			sc.Body = append(b, "no wait admits this request.\n"...)
		}
		return Reply{Status: StatusTooManyRequests, Body: sc.Body}
	}
	c := o.r.conc
	s, _ := RetryAfterSeconds(o.Result.RetryAfter)
	if !e.hdr.OmitRetryAfter {
		sc.Fields.Buf = strconv.AppendInt(sc.Fields.Buf, s, 10)
		sc.Fields.add(FieldRetryAfter, len(sc.Fields.Buf))
	}
	status := c.StatusCode()
	b := sc.Body[:0]
	if status == StatusServiceUnavailable {
		b = append(b, "Service Unavailable: "...)
	} else {
		b = append(b, "Too Many Requests: "...)
	}
	b = append(b, "at most "...)
	b = strconv.AppendInt(b, int64(c.Limit), 10)
	b = append(b, " requests in flight per client here; retry in "...)
	b = strconv.AppendInt(b, s, 10)
	sc.Body = append(b, " s.\n"...)
	return Reply{Status: status, Body: sc.Body}
}
