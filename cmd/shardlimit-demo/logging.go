package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Log budget: each message (a record's Message) may be logged logBurst
// times in a row, then once per logEvery; the records held back are
// counted in the next one's "suppressed" attribute. Messages are constant
// strings (the variable parts are attributes), and at most logMessages of
// them are tracked, so no fault of Redis and no client can make the log
// grow faster than about logMessages*(logBurst + t/logEvery) lines.
const (
	logBurst    = 10
	logEvery    = 10 * time.Second
	logMessages = 64
	logDetail   = 256 // bytes kept of a library's message
)

// newLogger returns the demo's logger: text records on w under the log
// budget.
func newLogger(w io.Writer) *slog.Logger {
	return slog.New(&limitHandler{
		next: slog.NewTextHandler(w, nil),
		lim:  &limiter{burst: logBurst, every: logEvery, msgs: make(map[string]*budget)},
	})
}

// limitHandler is a slog.Handler that passes each message within its
// budget to next.
type limitHandler struct {
	next slog.Handler
	lim  *limiter // shared by the handlers WithAttrs and WithGroup derive
}

func (h *limitHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h *limitHandler) Handle(ctx context.Context, r slog.Record) error {
	held, ok := h.lim.take(r.Message, r.Time)
	if !ok {
		return nil
	}
	if held > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int("suppressed", held))
	}
	return h.next.Handle(ctx, r)
}

func (h *limitHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &limitHandler{next: h.next.WithAttrs(as), lim: h.lim}
}

func (h *limitHandler) WithGroup(name string) slog.Handler {
	return &limitHandler{next: h.next.WithGroup(name), lim: h.lim}
}

// limiter is a token bucket per message.
type limiter struct {
	burst int
	every time.Duration

	mu   sync.Mutex
	msgs map[string]*budget
}

type budget struct {
	tokens float64
	at     time.Time // of the last refill
	held   int       // records held back since the last one logged
}

// take reports whether a record of msg at t is within its budget and, if
// so, how many were held back before it.
func (l *limiter) take(msg string, t time.Time) (held int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, found := l.msgs[msg]
	if !found {
		if len(l.msgs) >= logMessages {
			msg = "" // one budget for every message past the first ones
			b = l.msgs[msg]
		}
		if b == nil {
			b = &budget{tokens: float64(l.burst), at: t}
			l.msgs[msg] = b
		}
	}
	if d := t.Sub(b.at); d > 0 {
		b.tokens = min(float64(l.burst), b.tokens+float64(d)/float64(l.every))
		b.at = t
	}
	if b.tokens < 1 {
		b.held++
		return 0, false
	}
	b.tokens--
	held, b.held = b.held, 0
	return held, true
}

// detail formats a library's message, cut to logDetail bytes.
func detail(format string, args ...any) string {
	s := fmt.Sprintf(format, args...)
	if len(s) > logDetail {
		s = s[:logDetail] + "..."
	}
	return s
}

// redisLog routes go-redis's log (redis.SetLogger) through the demo's
// logger: while Redis is down it logs a failed dial for every command.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(_ context.Context, format string, args ...any) {
	l.log.Warn("redis client", "detail", detail(format, args...))
}

// serverLog is fasthttp's Server.Logger through the demo's logger: it logs
// every connection a client breaks or fills with garbage.
type serverLog struct{ log *slog.Logger }

// Printf logs fasthttp's message with the request bytes it quotes left
// out: even with SecureErrorLogMessage, fasthttp's parse errors quote what
// the client sent (`malformed mime header: missing colon: "..."`, `invalid
// request uri "..."`, `first line of request "..."`), always with %q, so
// each error argument has everything from its first double quote to its
// last replaced by redacted (see redactQuoted). The error's class and the
// connection's addresses (quoted in the format, not in the error) stay.
func (l serverLog) Printf(format string, args ...any) {
	safe := make([]any, len(args))
	for i, a := range args {
		if err, ok := a.(error); ok {
			a = redactQuoted(err.Error())
		}
		safe[i] = a
	}
	l.log.Warn("http server", "detail", detail(format, safe...))
}

// redacted replaces the quoted request bytes in a logged fasthttp error.
const redacted = `"(request bytes redacted)"`

// redactQuoted returns s with everything from its first double quote to
// its last replaced by redacted; s as is if it holds fewer than two. An
// escaped quote (\") inside a quoted string lies between the two, so no
// client byte is left whatever the client sent.
func redactQuoted(s string) string {
	i, j := strings.IndexByte(s, '"'), strings.LastIndexByte(s, '"')
	if i < 0 || j == i {
		if i >= 0 {
			return s[:i] + redacted // an unmatched quote: drop what follows
		}
		return s
	}
	return s[:i] + redacted + s[j+1:]
}
