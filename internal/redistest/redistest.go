// Package redistest holds test helpers for the Redis side of shardlimit: a
// check that the shared test Redis answers, private redis-server processes
// (a single node or a 6-node Cluster) in temporary directories, a loopback
// TCP fault proxy, a fake server answering garbage, and MONITOR capture.
//
// Everything listens on 127.0.0.1 only, every wait is bounded, and every
// process and goroutine started is stopped by the cleanup registered with
// the test (t.Cleanup), also when the test fails.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// DefaultAddr is the shared test Redis: the one CI starts (.ci/run), or
// any Redis already answering there.
const DefaultAddr = "127.0.0.1:6379"

// EnvAddr, if set, names the Redis RequireRedis uses instead of DefaultAddr
// (and instead of starting one of its own).
const EnvAddr = "SHARDLIMIT_REDIS_ADDR"

// installHint says how to get redis-server where it is missing.
const installHint = "install redis-server (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis) to run them"

// shared is the Redis RequireRedis resolved, once per test process.
var shared struct {
	once sync.Once
	addr string
	err  error   // why there is none
	skip bool    // err is "redis-server is not installed"
	srv  *Server // started by RequireRedis, stopped by StopAtExit
}

// RequireRedis returns the address of a Redis the test may use, resolved
// once per test process: $SHARDLIMIT_REDIS_ADDR if set; else DefaultAddr if
// a Redis answers PING there; else a private redis-server this package
// starts on a free loopback port (stopped when the tests end, see
// StopAtExit). Where redis-server is not installed the test is skipped with
// one line saying how to install it; any other failure fails the test.
// Tests must not flush this Redis: it may be shared with other processes,
// so they use keys under a prefix of their own (see Prefix).
func RequireRedis(t testing.TB) string {
	t.Helper()
	shared.once.Do(resolveShared)
	switch {
	case shared.skip:
		t.Skipf("redistest: skipping a test that needs Redis: %v; %s", shared.err, installHint)
	case shared.err != nil:
		t.Fatalf("redistest: no Redis for the tests: %v", shared.err)
	}
	return shared.addr
}

// resolveShared fills shared (see RequireRedis).
func resolveShared() {
	if addr := os.Getenv(EnvAddr); addr != "" {
		shared.addr = addr
		if err := ping(addr, 2*time.Second); err != nil {
			shared.err = fmt.Errorf("%s=%s: %w", EnvAddr, addr, err)
		}
		return
	}
	if ping(DefaultAddr, 500*time.Millisecond) == nil {
		shared.addr = DefaultAddr
		return
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		shared.err, shared.skip = fmt.Errorf("none answers at %s and redis-server is not on PATH", DefaultAddr), true
		return
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		shared.err = err
		return
	}
	s := &Server{bin: bin, dir: dir}
	for range 3 {
		if s.port, err = freePort(false); err != nil {
			continue
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
		if err = s.start(); err == nil {
			shared.addr, shared.srv = s.Addr, s
			return
		}
	}
	_ = os.RemoveAll(dir)
	shared.err = fmt.Errorf("none answers at %s, and starting redis-server failed: %w", DefaultAddr, err)
}

// ping reports whether a Redis at addr answers PING within d.
func ping(addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		v, err := Do(addr, "PING")
		if err == nil && v != "PONG" {
			err = fmt.Errorf("PING answered %v", v)
		}
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestingM is what a TestMain receives (*testing.M) and what
// goleak.VerifyTestMain takes.
type TestingM interface{ Run() int }

// StopAtExit wraps a package's *testing.M so that the Redis RequireRedis
// may have started is stopped, and its directory removed, when the tests
// end. Every package whose tests call RequireRedis uses it in TestMain:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(redistest.StopAtExit(m)) }
func StopAtExit(m TestingM) TestingM { return stopAtExit{m} }

type stopAtExit struct{ m TestingM }

func (s stopAtExit) Run() int {
	code := s.m.Run()
	if srv := shared.srv; srv != nil {
		srv.Stop()
		_ = os.RemoveAll(srv.dir)
	}
	return code
}

// Prefix returns a key prefix unique to this test and run, such as
// "t:TestName:4f2a9c:", so tests sharing one Redis never see each other's
// keys. It contains no brace.
func Prefix(t testing.TB) string {
	name := strings.NewReplacer("/", ".", "{", "(", "}", ")", " ", "_").Replace(t.Name())
	return fmt.Sprintf("t:%s:%06x:", name, rand.Uint32()&0xffffff)
}

// RedisServerPath returns the path of redis-server, skipping the test (with
// t.Skip and a message saying so) if it is not on PATH.
func RedisServerPath(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skipf("redistest: skipping a test that starts its own Redis: redis-server is not on PATH (%v); %s", err, installHint)
	}
	return p
}

// freePort returns a loopback TCP port that was free a moment ago; with
// bus true, port+10000 (the Redis Cluster bus) was free as well.
func freePort(bus bool) (int, error) {
	for range 100 {
		port := 20000 + rand.IntN(35000)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		if bus {
			l2, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
			if err != nil {
				l.Close()
				continue
			}
			l2.Close()
		}
		l.Close()
		return port, nil
	}
	return 0, errors.New("redistest: no free port found")
}

// Server is a redis-server process of the test's own, in a temporary
// directory, with no persistence: Stop then Start gives a Redis restarted
// empty on the same address.
type Server struct {
	// Addr is host:port on 127.0.0.1.
	Addr string

	t     testing.TB
	bin   string
	dir   string
	port  int
	extra []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// StartServer starts a private single-node redis-server on a free loopback
// port and waits (at most 10 s) until it answers PING. extra are more
// redis-server arguments, such as "--cluster-enabled", "yes". The server is
// killed by the test's cleanup. It skips the test if redis-server is
// missing and fails it if the server does not come up.
func StartServer(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin := RedisServerPath(t)
	s := &Server{t: t, bin: bin, dir: t.TempDir(), extra: extra}
	t.Cleanup(s.Stop)
	var err error
	for range 3 {
		if s.port, err = freePort(false); err != nil {
			continue
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
		if err = s.start(); err == nil {
			return s
		}
	}
	t.Fatalf("redistest: starting redis-server: %v", err)
	return nil
}

// args returns the command line of the server.
func (s *Server) args() []string {
	a := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log"),
	}
	return append(a, s.extra...)
}

// start launches the process and waits until it answers PING.
func (s *Server) start() error {
	cmd := exec.Command(s.bin, s.args()...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	var werr error
	go func() {
		werr = cmd.Wait()
		close(exited)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("redis-server on %s exited: %v; log:\n%s", s.Addr, werr, s.log())
		default:
		}
		if v, err := Do(s.Addr, "PING"); err == nil && v == "PONG" {
			s.mu.Lock()
			s.cmd, s.exited = cmd, exited
			s.mu.Unlock()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-exited
	return fmt.Errorf("redis-server on %s did not answer PING within 10s; log:\n%s", s.Addr, s.log())
}

func (s *Server) log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Stop kills the server (SIGKILL: no shutdown save) and waits for it to
// exit. Stopping a stopped server does nothing. Safe for concurrent use.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd, s.exited = nil, nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Process.Kill()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		if s.t != nil {
			s.t.Errorf("redistest: redis-server on %s did not exit within 10s of SIGKILL", s.Addr)
		}
	}
}

// Start starts a stopped server again on the same address, empty. It fails
// the test if the server does not come up within 10 s.
func (s *Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if running {
		return
	}
	var err error
	for range 50 { // the port may linger a moment after the kill
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restarting redis-server: %v", err)
}

// Pid returns the process id of the running server, or 0.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Monitor collects the commands a Redis receives, through MONITOR on a
// connection of its own, but for Sync's markers and the handshake (HELLO)
// of Do's connections.
type Monitor struct {
	addr string
	conn net.Conn
	done chan struct{}

	mu     sync.Mutex
	cmds   [][]string
	err    error
	synced map[string]int // sync marker -> len(cmds) when MONITOR showed it
}

// syncMarker prefixes the ECHO argument Sync sends; the collector keeps
// such commands out of Commands.
const syncMarker = "redistest-monitor-sync:"

var syncSeq struct {
	sync.Mutex
	n int
}

// StartMonitor sends MONITOR to the Redis at addr and collects every
// command it then executes, until Stop (or the test's cleanup). It fails
// the test if MONITOR is refused.
func StartMonitor(t testing.TB, addr string) *Monitor {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, DoTimeout)
	if err != nil {
		t.Fatalf("redistest: monitor %s: %v", addr, err)
	}
	_ = c.SetDeadline(time.Now().Add(DoTimeout))
	r := bufio.NewReader(c)
	if _, err := c.Write(AppendCommand(nil, "MONITOR")); err == nil {
		err = readOK(r)
	}
	if err != nil {
		c.Close()
		t.Fatalf("redistest: monitor %s: %v", addr, err)
	}
	_ = c.SetDeadline(time.Time{})
	m := &Monitor{addr: addr, conn: c, done: make(chan struct{}), synced: map[string]int{}}
	go m.read(r)
	t.Cleanup(func() { m.Stop() })
	return m
}

func (m *Monitor) read(r *bufio.Reader) {
	defer close(m.done)
	for {
		line, err := readLine(r)
		if err != nil {
			m.mu.Lock()
			m.err = err
			m.mu.Unlock()
			return
		}
		from, args, ok := parseMonitorLine(line)
		if !ok {
			continue
		}
		m.mu.Lock()
		switch {
		case len(args) == 2 && strings.EqualFold(args[0], "ECHO") && strings.HasPrefix(args[1], syncMarker):
			m.synced[args[1]] = len(m.cmds)
		case strings.EqualFold(args[0], "HELLO") && doConns.has(from):
			// Do's handshake: not the test's.
		default:
			m.cmds = append(m.cmds, args)
		}
		m.mu.Unlock()
	}
}

// Commands returns the commands collected so far, each as its arguments.
func (m *Monitor) Commands() [][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([][]string(nil), m.cmds...)
}

// Sync returns once the monitor has collected every command the server
// executed before Sync was called, and returns those commands. It sends
// an ECHO with a unique marker on a connection of its own and waits, at
// most 10 s, for MONITOR to show it: the server feeds its monitors in the
// order it executes commands, so everything before the marker is in. The
// marker never appears in Commands. It fails the test when the server
// does not answer or the marker does not show up in time; use it instead
// of sleeping for MONITOR to catch up.
func (m *Monitor) Sync(t testing.TB) [][]string {
	t.Helper()
	syncSeq.Lock()
	syncSeq.n++
	marker := syncMarker + strconv.Itoa(syncSeq.n)
	syncSeq.Unlock()
	if _, err := Do(m.addr, "ECHO", marker); err != nil {
		t.Fatalf("redistest: monitor sync with %s: %v", m.addr, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		m.mu.Lock()
		n, ok := m.synced[marker]
		err := m.err
		var cmds [][]string
		if ok {
			cmds = append(cmds, m.cmds[:n]...)
		}
		m.mu.Unlock()
		switch {
		case ok:
			return cmds
		case err != nil:
			t.Fatalf("redistest: monitor of %s stopped before the sync marker: %v", m.addr, err)
		case time.Now().After(deadline):
			t.Fatalf("redistest: MONITOR of %s did not show the sync marker within 10s", m.addr)
		}
		time.Sleep(time.Millisecond)
	}
}

// readOK reads a reply that must be +OK.
func readOK(r *bufio.Reader) error {
	line, err := readLine(r)
	if err == nil && line != "+OK" {
		err = fmt.Errorf("redistest: replied %q, want +OK", line)
	}
	return err
}

// Stop ends the capture and returns every command collected. It is
// idempotent.
func (m *Monitor) Stop() [][]string {
	_ = m.conn.Close()
	<-m.done
	return m.Commands()
}
