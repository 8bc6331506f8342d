package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// server is a private redis-server on a loopback port, in a temporary
// directory, with no persistence: kill then start gives a Redis restarted
// empty on the same address.
type server struct {
	addr string
	port int
	bin  string
	dir  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// startServer starts a redis-server on a free loopback port and waits
// until it answers PING.
func startServer(ctx context.Context) (*server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server is not on PATH: %w", err)
	}
	dir, err := os.MkdirTemp("", "shardlimit-faults-")
	if err != nil {
		return nil, err
	}
	s := &server{bin: bin, dir: dir}
	for range 3 {
		if s.port, err = freePort(); err != nil {
			continue
		}
		s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
		if err = s.start(ctx); err == nil {
			return s, nil
		}
	}
	_ = os.RemoveAll(dir)
	return nil, err
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start launches the process and waits (at most 10 s) until it answers.
func (s *server) start(ctx context.Context) error {
	cmd := exec.Command(s.bin,
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--dir", s.dir, "--logfile", filepath.Join(s.dir, "redis.log"))
	cmd.Dir = s.dir
	cmd.SysProcAttr = procAttr()
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
	for time.Now().Before(deadline) && ctx.Err() == nil {
		select {
		case <-exited:
			return fmt.Errorf("redis-server on %s exited: %v", s.addr, werr)
		default:
		}
		if pingOnce(s.addr) == nil {
			s.mu.Lock()
			s.cmd, s.exited = cmd, exited
			s.mu.Unlock()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
	return fmt.Errorf("redis-server on %s did not answer PING within 10s", s.addr)
}

// kill sends SIGKILL and waits for the process to exit. Killing a killed
// server does nothing. Safe for concurrent use.
func (s *server) kill() {
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
	}
}

// restart starts a killed server again, empty, on the same port.
func (s *server) restart(ctx context.Context) error {
	var err error
	for range 50 { // the port may linger a moment after the kill
		if err = s.start(ctx); err == nil || ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// close kills the server and removes its directory.
func (s *server) close() {
	s.kill()
	_ = os.RemoveAll(s.dir)
}

// pingOnce sends one PING over a fresh connection and checks the reply.
func pingOnce(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return errors.New("PING answered " + strconv.Quote(line))
	}
	return nil
}
