// Package outbound paces outgoing requests: calls a client makes to a
// service that limits them (an API with a published quota, a partner's
// endpoint). A Pacer takes each call's units from a shardlimit.Limiter,
// per key, by waiting for them (the default) or by failing fast, and
// honours the service's own answer: Hold(key, until) makes every call on
// that key wait, or fail fast, until then. Transport is an
// http.RoundTripper that does both for an http.Client: it keys requests by
// host, paces them, and holds a host that answers 429 or 503 with a
// Retry-After (RFC 9110, section 10.2.3). The gRPC client interceptors of
// module github.com/shardlimit/shardlimit/grpclimit build on the same
// Pacer.
//
// A Pacer never lets a call through that its limiter denies or that a
// stored hold forbids (the hold table is capped: Config.MaxHolds): when
// speed and that promise conflict, the promise wins (a call
// taken during a wait that a hold then covers takes its units again after
// the hold, so calls never burst at a hold's end).
//
// Time comes from the limiter's Clock, so a shardlimit.ManualClock drives
// waits and holds in tests. A Pacer starts no goroutine: a waiting call
// sleeps in its own goroutine on the Clock.
package outbound
