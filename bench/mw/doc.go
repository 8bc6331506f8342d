// Package mw benchmarks rate limiting at the middleware level, on
// github.com/valyala/fasthttp: shardlimit's fasthttpmw against ulule/limiter's
// fasthttp middleware and a bare handler without any limiter, on the path
// that admits and on the path that answers 429. It has no code of its own
// beyond its benchmarks and their checks (mw_test.go).
//
// Every benchmark drives a handler directly with one fasthttp.RequestCtx,
// resetting the response between requests as the server does; no network is
// involved. Each middleware reads its own clock per request, as it does in a
// server: fasthttpmw its default, shardlimit.DefaultClock() (one monotonic
// clock read), ulule's store time.Now. The server's own read of the request
// time is excluded for all of them alike.
package mw
