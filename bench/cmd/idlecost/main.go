// Command idlecost measures what rate limiters cost while nothing asks
// them anything: process CPU time (user + system, from getrusage or
// /proc/<pid>/stat, never wall-clock guesses) over a period, goroutines,
// INFO commands sent to Redis, and the size of /metrics. It prints one
// markdown table row per case.
//
// Cases:
//
//   - core: -n in-process limiters (the four algorithms in turn), windows
//     of -window, the default janitor, no key (or, with -touch, one key
//     each, then idle); measured in this process with getrusage.
//   - sync: -n rules in this process as the demo builds them with -redis,
//     without HTTP: half sync.Shared (fixed window), half sync.Exact
//     (GCRA), windows of -window, on one go-redis client of a private
//     redis-server; with -touch, one decision each first. Measured with
//     getrusage, INFO commandstats and runtime.NumGoroutine (those added
//     to one Shared and one Exact). The rules file's cap (1,000 rules)
//     does not apply, so this is the case of 10,000.
//   - metrics: the size of /metrics for -n rules built in Go (no file
//     cap) as the demo builds them with -redis, half sync.Shared and half
//     sync.Exact on one client: bytes and series of metrics.WriteText for
//     a Middleware source per rule, WithGroup(AllRules) and
//     WithGroup(ByTier), and the CPU time of one scrape.
//   - mem: the resident memory of -n idle rules built as in the metrics
//     case (a middleware, half sync.Shared and half sync.Exact): heap in
//     use and RSS after a forced GC, and their growth per rule; with
//     -memprofile, a heap profile (go tool pprof -inuse_space).
//   - demo: the demo server (cmd/shardlimit-demo, built from -root) with a
//     generated rules file of -n rules on paths /r0 ... /r<n-1>, half
//     fixed_window (sync.Shared), half gcra (sync.Exact), windows of
//     -window, against a private redis-server on a free loopback port;
//     with -touch, one request to each rule first, then idle. CPU time is
//     the demo process's (/proc/<pid>/stat utime+stime); INFO calls are
//     cmdstat_info's calls over the period (INFO commandstats, less the
//     harness's own reads); goroutines are counted in the stack dump of
//     SIGQUIT at the end.
//
// Usage (from bench/):
//
//	go run ./cmd/idlecost -case core -n 10000 [-touch] [-dur 1m] [-cpuprofile f]
//	go run ./cmd/idlecost -case sync -n 10000 [-touch] [-dur 1m] [-cpuprofile f]
//	go run ./cmd/idlecost -case metrics -n 10000
//	go run ./cmd/idlecost -case mem -n 10000 [-shards 4] [-memprofile f]
//	go run ./cmd/idlecost -case demo -n 1000 [-touch] [-dur 1m] [-metrics-group rule]
//
// Unix (Linux for the demo case) only.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/fasthttpmw"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/metrics"
	shardsync "github.com/shardlimit/shardlimit/sync"
)

type params struct {
	kind, root, group, profile, memprofile string
	n, shards                              int
	touch                                  bool
	dur, window, settle                    time.Duration
}

func main() {
	var p params
	flag.StringVar(&p.kind, "case", "core", "`case`: core or demo")
	flag.IntVar(&p.n, "n", 1000, "limiters (core) or rules (demo)")
	flag.BoolVar(&p.touch, "touch", false, "one request per limiter or rule first, then idle")
	flag.DurationVar(&p.dur, "dur", time.Minute, "measured period")
	flag.DurationVar(&p.settle, "settle", 3*time.Second, "wait before the measured period")
	flag.DurationVar(&p.window, "window", time.Second, "window of every limiter or rule")
	flag.StringVar(&p.root, "root", "..", "the shardlimit repository (demo case)")
	flag.StringVar(&p.group, "metrics-group", "rule", "the demo's -metrics-group")
	flag.StringVar(&p.profile, "cpuprofile", "", "write a CPU profile of the measured period (core case)")
	flag.IntVar(&p.shards, "shards", 0, "Config.Shards of each rule's limiter (mem case; 0: the default)")
	flag.StringVar(&p.memprofile, "memprofile", "", "write a heap profile after building the rules (mem case)")
	flag.Parse()
	var row string
	var err error
	switch p.kind {
	case "core":
		row, err = runCore(p)
	case "sync":
		row, err = runSync(p)
	case "metrics":
		row, err = runMetrics(p)
	case "mem":
		row, err = runMem(p)
	case "demo":
		row, err = runDemo(p)
	default:
		err = fmt.Errorf("unknown -case %q", p.kind)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "idlecost:", err)
		os.Exit(1)
	}
	fmt.Println(row)
}

// cpuSelf returns this process's CPU time, user + system.
func cpuSelf() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func share(cpu, wall time.Duration) string {
	return fmt.Sprintf("%.2f%%", 100*cpu.Seconds()/wall.Seconds())
}

func state(touch bool) string {
	if touch {
		return "one request each, then idle"
	}
	return "no traffic"
}

// runCore measures p.n idle in-process limiters.
func runCore(p params) (string, error) {
	algs := []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingLog, shardlimit.SlidingCounter, shardlimit.GCRA}
	ls := make([]shardlimit.Limiter, p.n)
	g0 := runtime.NumGoroutine()
	for i := range ls {
		l, err := shardlimit.New(shardlimit.Config{Algorithm: algs[i%4], Limit: 10, Window: p.window})
		if err != nil {
			return "", err
		}
		defer l.Close()
		if p.touch {
			l.Allow("k")
		}
		ls[i] = l
	}
	runtime.GC()
	time.Sleep(p.settle)
	stop, err := startProfile(p)
	if err != nil {
		return "", err
	}
	c0, t0 := cpuSelf(), time.Now()
	time.Sleep(p.dur)
	cpu, wall := cpuSelf()-c0, time.Since(t0)
	stop()
	g := runtime.NumGoroutine() - g0
	return fmt.Sprintf("| core, %d limiters, %v windows, %s | %v | %v | %s | %d | - | - |",
		p.n, p.window, state(p.touch), wall.Round(time.Second), cpu.Round(time.Millisecond), share(cpu, wall), g), nil
}

// startProfile starts a CPU profile into p.profile, if set, and returns
// its stop.
func startProfile(p params) (func(), error) {
	if p.profile == "" {
		return func() {}, nil
	}
	f, err := os.Create(p.profile)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// privateRedis starts a redis-server of its own on a free loopback port
// and returns its address and what stops it.
func privateRedis(ctx context.Context) (string, func(), error) {
	dir, err := os.MkdirTemp("", "idlecost-")
	if err != nil {
		return "", nil, err
	}
	rs, err := startRedis(ctx, dir)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return rs.addr, func() { rs.kill(); os.RemoveAll(dir) }, nil
}

// syncClient returns a go-redis client with the options the sync package
// doc asks for, as the demo's.
func syncClient(addr string) *redis.Client {
	opt := &redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, DialerRetries: 1}
	opt.Dialer = shardsync.LimitReplies(redis.NewDialer(opt), 0)
	return redis.NewClient(opt)
}

// newSyncLimiter builds rule's limiter as the demo does with -redis: a
// sync.Exact for GCRA, a sync.Shared for the others.
func newSyncLimiter(client *redis.Client, rule string, cfg shardlimit.Config) (shardlimit.Limiter, error) {
	prefix := "idle:" + rule + ":"
	if cfg.Algorithm == shardlimit.GCRA {
		return shardsync.NewExact(client, shardsync.ExactConfig{Config: cfg, Prefix: prefix})
	}
	return shardsync.NewShared(client, shardsync.SharedConfig{Config: cfg, Prefix: prefix,
		FlushTimeout: 500 * time.Millisecond})
}

// runSync measures p.n idle sync limiters on one client.
func runSync(p params) (string, error) {
	ctx := context.Background()
	addr, cleanup, err := privateRedis(ctx)
	if err != nil {
		return "", err
	}
	defer cleanup()
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	client := syncClient(addr)
	defer client.Close()
	var g0 int
	for i := range p.n {
		alg := shardlimit.FixedWindow
		if i%2 == 1 {
			alg = shardlimit.GCRA
		}
		l, err := newSyncLimiter(client, fmt.Sprint("r", i), shardlimit.Config{Algorithm: alg, Limit: 100, Window: p.window})
		if err != nil {
			return "", err
		}
		defer l.Close()
		if p.touch {
			l.Allow("k")
		}
		if i == 1 {
			time.Sleep(100 * time.Millisecond) // a dial in flight ends
			g0 = runtime.NumGoroutine()
		}
	}
	time.Sleep(p.settle)
	g := runtime.NumGoroutine() - g0
	stop, err := startProfile(p)
	if err != nil {
		return "", err
	}
	i0, err := infoCalls(ctx, rc)
	if err != nil {
		return "", err
	}
	c0, t0 := cpuSelf(), time.Now()
	time.Sleep(p.dur)
	cpu, wall := cpuSelf()-c0, time.Since(t0)
	stop()
	i1, err := infoCalls(ctx, rc)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("| sync, %d limiters (Shared + Exact, one client), %v windows, %s | %v | %v | %s | +%d | %.2f/s | - |",
		p.n, p.window, state(p.touch), wall.Round(time.Second), cpu.Round(time.Millisecond), share(cpu, wall), g,
		float64(i1-i0-1)/wall.Seconds()), nil
}

// runMetrics measures /metrics for p.n rules on a private Redis.
func runMetrics(p params) (string, error) {
	addr, cleanup, err := privateRedis(context.Background())
	if err != nil {
		return "", err
	}
	defer cleanup()
	client := syncClient(addr)
	defer client.Close()
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
		return newSyncLimiter(client, rule, cfg)
	}
	mw, err := fasthttpmw.New(fasthttpmw.Config{Options: httplimit.Options{Rules: rules, NewLimiter: newLimiter}})
	if err != nil {
		return "", err
	}
	defer mw.Close()
	var rows []string
	for _, g := range []struct {
		name string
		opts []metrics.Option
	}{{"per rule (no WithGroup)", nil}, {"WithGroup(AllRules)", []metrics.Option{metrics.WithGroup(metrics.AllRules)}},
		{"WithGroup(ByTier)", []metrics.Option{metrics.WithGroup(metrics.ByTier)}}} {
		src := metrics.Middleware(mw, g.opts...)
		var buf bytes.Buffer
		if err := metrics.WriteText(&buf, src); err != nil { // the first scrape of a group source sets it up
			return "", err
		}
		buf.Reset()
		stop, err := startProfile(p)
		if err != nil {
			return "", err
		}
		c0 := cpuSelf()
		if err := metrics.WriteText(&buf, src); err != nil {
			return "", err
		}
		cpu := cpuSelf() - c0
		stop()
		p.profile = "" // the first grouping's scrape only
		series := 0
		for _, line := range bytes.Split(buf.Bytes(), []byte("\n")) {
			if len(line) > 0 && line[0] != '#' {
				series++
			}
		}
		rows = append(rows, fmt.Sprintf("| %d rules (Shared + Exact), %s | %d | %d | %.1f | %v |",
			p.n, g.name, series, buf.Len(), float64(buf.Len())/float64(1<<20), cpu.Round(time.Millisecond)))
	}
	return strings.Join(rows, "\n"), nil
}

// rulesFile writes p.n rules to a file in dir: even ones fixed_window
// (Shared with -redis), odd ones gcra (Exact).
func rulesFile(dir string, p params) (string, error) {
	type rule struct {
		Name      string `json:"name"`
		Path      string `json:"path"`
		Algorithm string `json:"algorithm"`
		Limit     int    `json:"limit"`
		Window    string `json:"window"`
	}
	rs := make([]rule, p.n)
	for i := range rs {
		alg := "fixed_window"
		if i%2 == 1 {
			alg = "gcra"
		}
		rs[i] = rule{fmt.Sprint("r", i), fmt.Sprint("/r", i), alg, 100, p.window.String()}
	}
	b, err := json.Marshal(map[string]any{"rules": rs})
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "rules.json")
	return path, os.WriteFile(path, b, 0o644)
}

// runDemo measures the demo server with p.n rules on a private Redis.
func runDemo(p params) (string, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "idlecost-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	raddr, cleanup, err := privateRedis(ctx)
	if err != nil {
		return "", err
	}
	defer cleanup()
	rc := redis.NewClient(&redis.Options{Addr: raddr})
	defer rc.Close()
	d, err := startDemo(p, dir, raddr)
	if err != nil {
		return "", err
	}
	defer d.cmd.Process.Kill()
	if p.touch {
		if err := touchRules(d.addr, p.n); err != nil {
			return "", err
		}
	}
	time.Sleep(p.settle)
	i0, err := infoCalls(ctx, rc)
	if err != nil {
		return "", err
	}
	c0, t0 := cpuOf(d.cmd.Process.Pid), time.Now()
	time.Sleep(p.dur)
	cpu, wall := cpuOf(d.cmd.Process.Pid)-c0, time.Since(t0)
	i1, err := infoCalls(ctx, rc)
	if err != nil {
		return "", err
	}
	infos := i1 - i0 - 1 // the first read counts itself
	metricsBytes, err := getSize("http://" + d.admin + "/metrics")
	if err != nil {
		return "", err
	}
	rss := rssOf(d.cmd.Process.Pid)
	goroutines, err := stackDump(d.cmd, d.stderr)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("| demo -redis, %d rules (Shared + Exact), %v windows, %s | %v | %v | %s | %d | %.2f/s | %d B (-metrics-group=%s), RSS %d MB |",
		p.n, p.window, state(p.touch), wall.Round(time.Second), cpu.Round(time.Millisecond), share(cpu, wall),
		goroutines, float64(infos)/wall.Seconds(), metricsBytes, p.group, rss>>20), nil
}

// demo is a running demo server.
type demo struct {
	cmd         *exec.Cmd
	stderr      *bytes.Buffer
	addr, admin string // its listener and its admin (-metrics) listener
}

// startDemo builds the demo from p.root into dir and starts it with a
// rules file of p.n rules and -redis raddr, once it listens.
func startDemo(p params, dir, raddr string) (*demo, error) {
	bin := filepath.Join(dir, "demo")
	build := exec.Command("go", "build", "-o", bin, "./cmd/shardlimit-demo")
	build.Dir, build.Stderr = p.root, os.Stderr
	if err := build.Run(); err != nil {
		return nil, fmt.Errorf("building the demo: %w", err)
	}
	rules, err := rulesFile(dir, p)
	if err != nil {
		return nil, err
	}
	d := &demo{stderr: &bytes.Buffer{}}
	d.cmd = exec.Command(bin, "-addr", "127.0.0.1:0", "-metrics", "127.0.0.1:0", "-rules", rules,
		"-redis", raddr, "-metrics-group", p.group)
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	d.cmd.Env = append(os.Environ(), "GOTRACEBACK=all")
	d.cmd.Stderr = d.stderr
	out, err := d.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	if d.addr, d.admin, err = demoAddrs(out); err != nil {
		_ = d.cmd.Process.Kill()
		_ = d.cmd.Wait()
		return nil, fmt.Errorf("%w; stderr: %s", err, tail(d.stderr.String()))
	}
	go io.Copy(io.Discard, out)
	return d, nil
}

var listenRE = regexp.MustCompile(`listening on http://(\S+) `)
var metricsRE = regexp.MustCompile(`metrics: http://(\S+)/metrics`)

// demoAddrs reads the demo's startup lines for its two addresses.
func demoAddrs(out io.Reader) (addr, admin string, err error) {
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
			addr = m[1]
		}
		if m := metricsRE.FindStringSubmatch(sc.Text()); m != nil {
			admin = m[1]
		}
		if addr != "" && admin != "" {
			return addr, admin, nil
		}
	}
	return "", "", errors.New("the demo exited before it listened")
}

// touchRules sends one request to each rule's path.
func touchRules(addr string, n int) error {
	c := &http.Client{Timeout: 5 * time.Second}
	for i := range n {
		resp, err := c.Get(fmt.Sprintf("http://%s/r%d", addr, i))
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound {
			return fmt.Errorf("/r%d: %s", i, resp.Status)
		}
	}
	return nil
}

// infoCalls returns cmdstat_info's calls.
func infoCalls(ctx context.Context, rc *redis.Client) (int64, error) {
	s, err := rc.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(s, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_info:calls="); ok {
			n, _, _ := strings.Cut(rest, ",")
			return strconv.ParseInt(n, 10, 64)
		}
	}
	return 0, nil
}

// cpuOf returns process pid's CPU time, user + system, from /proc.
func cpuOf(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command's closing parenthesis; utime and stime
	// are fields 14 and 15 of the line, 12 and 13 after it.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const clkTck = 100 // sysconf(_SC_CLK_TCK) on Linux
	return time.Duration(ut+st) * time.Second / clkTck
}

// rssOf returns process pid's resident set, bytes.
func rssOf(pid int) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func getSize(url string) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return len(b), err
}

// stackDump ends the demo with SIGQUIT and counts the goroutines of its
// stack dump.
func stackDump(cmd *exec.Cmd, stderr *bytes.Buffer) (int, error) {
	if err := cmd.Process.Signal(syscall.SIGQUIT); err != nil {
		return 0, err
	}
	_ = cmd.Wait()
	n := strings.Count(stderr.String(), "\ngoroutine ")
	if strings.HasPrefix(stderr.String(), "goroutine ") {
		n++
	}
	if n == 0 {
		return 0, fmt.Errorf("no stack dump; stderr: %s", tail(stderr.String()))
	}
	return n, nil
}

func tail(s string) string {
	if len(s) > 2000 {
		return s[len(s)-2000:]
	}
	return s
}

// redisServer is a private redis-server on a free loopback port.
type redisServer struct {
	addr string
	cmd  *exec.Cmd
}

func startRedis(ctx context.Context, dir string) (*redisServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	rs := &redisServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd}
	rc := redis.NewClient(&redis.Options{Addr: rs.addr})
	defer rc.Close()
	for range 200 {
		if rc.Ping(ctx).Err() == nil {
			return rs, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	rs.kill()
	return nil, errors.New("redis-server did not answer")
}

func (rs *redisServer) kill() {
	_ = rs.cmd.Process.Kill()
	_ = rs.cmd.Wait()
}
