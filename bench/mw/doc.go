// Package mw benchmarks rate limiting at the middleware level, on
// github.com/valyala/fasthttp: shardlimit's fasthttpmw against ulule/limiter's
// fasthttp middleware and a bare handler without any limiter, on the path
// that admits and on the path that answers 429. It has no code of its own
// beyond its benchmarks and their checks (mw_test.go).
//
// Every benchmark drives a handler directly with one fasthttp.RequestCtx,
// resetting the response between requests as the server does; no network is
// involved. The request's instant is ctx.Time(), fixed at ctx.Init: the
// server's own clock read per request is excluded for every middleware
// alike, while ulule's store still reads time.Now itself.
package mw
