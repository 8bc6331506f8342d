package httplimit

import (
	"strconv"
	"time"

	"github.com/shardlimit/shardlimit"
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

// HeaderWriter receives the fields of one response. value is only valid
// during the call; implementations copy it.
type HeaderWriter interface {
	SetHeader(f Field, value []byte)
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

// WriteHeaders writes d's rate-limit fields (those selected by
// Options.Headers; Retry-After only for a denial that is not a dry run) to
// w, formatting values in buf, and returns buf for reuse. It writes nothing
// for a decision that matched no rule.
func (e *Engine) WriteHeaders(w HeaderWriter, d *Decision, buf []byte) []byte {
	r := d.r
	if r == nil || e.headers&HeaderNone != 0 {
		return buf
	}
	res := &d.Result
	reset := CeilSeconds(res.ResetAfter)
	if e.headers&HeaderXRateLimit != 0 {
		buf = strconv.AppendInt(buf[:0], int64(res.Limit), 10)
		w.SetHeader(FieldLimit, buf)
		buf = strconv.AppendInt(buf[:0], int64(res.Remaining), 10)
		w.SetHeader(FieldRemaining, buf)
		v := reset
		if e.resetUnix {
			// The reset instant R = now + ResetAfter, in Unix seconds
			// rounded up.
			ns := d.now.UnixNano() + int64(res.ResetAfter)
			v = ns / 1e9
			if ns%1e9 > 0 {
				v++
			}
		}
		buf = strconv.AppendInt(buf[:0], v, 10)
		w.SetHeader(FieldReset, buf)
	}
	if e.headers&HeaderIETF != 0 {
		buf = append(buf[:0], r.sfName...)
		buf = append(buf, ";q="...)
		buf = strconv.AppendInt(buf, int64(res.Limit), 10)
		buf = append(buf, ";w="...)
		buf = strconv.AppendInt(buf, CeilSeconds(r.window), 10)
		w.SetHeader(FieldPolicy, buf)
		buf = append(buf[:0], r.sfName...)
		buf = append(buf, ";r="...)
		buf = strconv.AppendInt(buf, int64(res.Remaining), 10)
		buf = append(buf, ";t="...)
		buf = strconv.AppendInt(buf, reset, 10)
		w.SetHeader(FieldRateLimit, buf)
	}
	if e.headers&HeaderVerbose != 0 {
		ms := int64(r.window / time.Millisecond)
		if r.window%time.Millisecond != 0 {
			ms++
		}
		buf = strconv.AppendInt(buf[:0], ms, 10)
		w.SetHeader(FieldWindowMs, buf)
		buf = append(buf[:0], r.strategy...)
		w.SetHeader(FieldStrategy, buf)
	}
	if e.headers&HeaderRetryAfter != 0 && d.action == ActionDeny {
		if s, ok := RetryAfterSeconds(res.RetryAfter); ok {
			buf = strconv.AppendInt(buf[:0], s, 10)
			w.SetHeader(FieldRetryAfter, buf)
		}
	}
	return buf
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

// Response bodies (text/plain; charset=utf-8) of the non-429 answers.
const (
	// BodyBadCost is the 500 body for a negative request cost.
	BodyBadCost = "Internal Server Error: invalid request cost.\n"
	// BodyNoIdentity is the 400 body for a request without a client
	// identity under EmptyKeyReject.
	BodyNoIdentity = "Bad Request: missing client identity.\n"
	// BodyUnavailable is the 503 body for a failed decision under
	// FailClosed.
	BodyUnavailable = "Service Unavailable: rate limiter unavailable.\n"
)

// ContentType is the Content-Type of every body the middleware writes.
const ContentType = "text/plain; charset=utf-8"

// AppendDenyBody appends the text/plain body of a 429 for d to dst, e.g.
// "Too Many Requests: limit of 10 per 60 s reached; retry in 57 s.\n".
func AppendDenyBody(dst []byte, d *Decision) []byte {
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
