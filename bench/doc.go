// Package bench compares shardlimit with the Go rate limiters its users
// already know, on the same scenarios and with equivalent limits.
//
// Every limiter sits behind the Keyed interface, one small adapter file per
// peer (peer_*.go) and one for shardlimit (ours.go). Limiters whose API takes
// an explicit instant also implement AtKeyed. The benchmarks live in
// bench_test.go, the accuracy report in cmd/accuracy, the middleware
// benchmarks in the mw subpackage, the Redis sync benchmarks in syncbench;
// run.sh runs them all and summarises them with benchstat. See README.md.
//
// This is a separate Go module (with a replace of the root module), so the
// peers never enter shardlimit's own go.mod.
package bench
