package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/fasthttpmw"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/metrics"
)

// runMem measures the resident memory of p.n idle rules: the middleware
// with p.n rules (half sync.Shared, half sync.Exact on one client, as
// the metrics case builds them), no traffic. It reports the heap in use
// and the process's RSS after a forced GC, before and after building
// the rules, and their difference per rule. With -shards, each rule's
// limiter has that many shards (Config.Shards); with -metrics-group all,
// the rules are scraped once through metrics.WithGroup(AllRules) first,
// whose source keeps each rule's last counts.
func runMem(p params) (string, error) {
	addr, cleanup, err := privateRedis(context.Background())
	if err != nil {
		return "", err
	}
	defer cleanup()
	client := syncClient(addr)
	defer client.Close()
	h0, r0 := memNow()
	rules := &httplimit.Rules{}
	for i := range p.n {
		alg := shardlimit.FixedWindow
		if i%2 == 1 {
			alg = shardlimit.GCRA
		}
		rules.Rules = append(rules.Rules, httplimit.Rule{Name: fmt.Sprint("r", i), Path: fmt.Sprint("/r", i),
			Algorithm: alg, Limit: 100, Window: p.window})
	}
	newLimiter := func(rule string, cfg shardlimit.Config) (shardlimit.Limiter, error) {
		cfg.Shards = p.shards // 0: the default
		return newSyncLimiter(client, rule, cfg)
	}
	mw, err := fasthttpmw.New(fasthttpmw.Config{Options: httplimit.Options{Rules: rules, NewLimiter: newLimiter}})
	if err != nil {
		return "", err
	}
	defer mw.Close()
	var src metrics.Source
	if p.group == "all" { // what a grouped source keeps after a scrape
		src = metrics.Middleware(mw, metrics.WithGroup(metrics.AllRules))
		if err := metrics.WriteText(io.Discard, src); err != nil {
			return "", err
		}
	}
	h1, r1 := memNow()
	if p.memprofile != "" {
		f, err := os.Create(p.memprofile)
		if err != nil {
			return "", err
		}
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			f.Close()
			return "", err
		}
		f.Close()
	}
	runtime.KeepAlive(mw)
	runtime.KeepAlive(src)
	mb := func(b uint64) string { return fmt.Sprintf("%.1f MB", float64(b)/(1<<20)) }
	per := func(a, b uint64) string {
		if b < a {
			return "-"
		}
		return fmt.Sprintf("%.1f KB", float64(b-a)/float64(p.n)/1024)
	}
	shards := "default shards"
	if p.group == "all" {
		shards += ", scraped once WithGroup(AllRules)"
	}
	if p.shards > 0 {
		shards = fmt.Sprintf("Shards %d", p.shards)
	}
	return fmt.Sprintf("| mw, %d rules (Shared + Exact, one client), %s, no traffic | heap in use %s (%s/rule) | RSS %s (%s/rule) |",
		p.n, shards, mb(h1), per(h0, h1), mb(r1), per(r0, r1)), nil
}

// memNow returns the heap in use and the RSS after a forced GC that
// returns freed memory to the OS.
func memNow() (heap, rss uint64) {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse, uint64(rssOf(os.Getpid()))
}
