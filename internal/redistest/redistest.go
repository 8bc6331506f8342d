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

// DefaultAddr is the shared test Redis that CI starts (.ci/run).
const DefaultAddr = "127.0.0.1:6379"

// Environment variables read by RequireRedis.
const (
	// EnvAddr overrides DefaultAddr.
	EnvAddr = "SHARDLIMIT_REDIS_ADDR"
	// EnvSkip, set to 1, makes RequireRedis skip instead of fail when
	// Redis does not answer (for machines without Redis).
	EnvSkip = "SHARDLIMIT_SKIP_REDIS"
)

// RequireRedis returns the address of the shared test Redis (DefaultAddr or
// $SHARDLIMIT_REDIS_ADDR) after checking, within 2 s, that it answers PING.
// If it does not, the test fails with a message that says how to start one,
// or is skipped when $SHARDLIMIT_SKIP_REDIS is 1. Tests must not flush the
// shared Redis: use keys under a prefix of their own (see Prefix).
func RequireRedis(t testing.TB) string {
	t.Helper()
	addr := os.Getenv(EnvAddr)
	if addr == "" {
		addr = DefaultAddr
	}
	deadline := time.Now().Add(2 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		var v any
		if v, err = Do(addr, "PING"); err == nil && v == "PONG" {
			return addr
		}
		if err == nil {
			err = fmt.Errorf("PING answered %v", v)
		}
		time.Sleep(100 * time.Millisecond)
	}
	msg := fmt.Sprintf("redistest: no Redis answering at %s (%v); start one with\n"+
		"\tredis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save \"\" --appendonly no\n"+
		"or set %s=1 to skip the tests that need it", addr, err, EnvSkip)
	if os.Getenv(EnvSkip) == "1" {
		t.Skip(msg)
	}
	t.Fatal(msg)
	return ""
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
		t.Skipf("redistest: redis-server is not on PATH (%v): skipping a test that starts its own Redis; install redis-server to run it", err)
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
		s.t.Errorf("redistest: redis-server on %s did not exit within 10s of SIGKILL", s.Addr)
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
// connection of its own.
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
		_, err = ReadReply(r)
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
		if args, ok := ParseMonitorLine(line); ok {
			m.mu.Lock()
			if len(args) == 2 && strings.EqualFold(args[0], "ECHO") && strings.HasPrefix(args[1], syncMarker) {
				m.synced[args[1]] = len(m.cmds)
			} else {
				m.cmds = append(m.cmds, args)
			}
			m.mu.Unlock()
		}
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

// Stop ends the capture and returns every command collected. It is
// idempotent.
func (m *Monitor) Stop() [][]string {
	_ = m.conn.Close()
	<-m.done
	return m.Commands()
}
