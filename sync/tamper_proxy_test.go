package sync

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit/internal/redistest"
)

// tamperProxy is a loopback proxy in front of a real Redis that reads each
// command and its reply whole, and tampers with every k-th reply to a
// script call (EVALSHA or EVAL): it stalls it (never answers, so the
// client's call times out and it drops the connection) or replaces it with
// garbage. The share of tampered script replies is thus 1/k, decided by the
// test and not by timing.
type tamperProxy struct {
	Addr    string
	target  string
	ln      net.Listener
	every   atomic.Int64 // k; 0: pass everything
	garbage atomic.Bool  // garbage instead of a stall
	scripts atomic.Int64 // script replies seen
	wg      stdsync.WaitGroup

	mu     stdsync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// startTamperProxy starts a tamperProxy in front of target, passing every
// reply until set is called; the test's cleanup stops it.
func startTamperProxy(t *testing.T, target string) *tamperProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tamperProxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// set tampers with every k-th script reply from now on (0: none), with
// garbage or a stall.
func (p *tamperProxy) set(k int, garbage bool) {
	p.garbage.Store(garbage)
	p.every.Store(int64(k))
}

func (p *tamperProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *tamperProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *tamperProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil || !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve carries one connection command by command.
func (p *tamperProxy) serve(c net.Conn) {
	defer p.wg.Done()
	defer c.Close()
	up, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil || !p.track(up) {
		return
	}
	defer up.Close()
	rc, ru := bufio.NewReader(c), bufio.NewReader(up)
	for {
		args, err := redistest.ReadCommand(rc)
		if err != nil || len(args) == 0 {
			return
		}
		if _, err := up.Write(redistest.AppendCommand(nil, args...)); err != nil {
			return
		}
		reply, err := readReply(ru, nil)
		if err != nil {
			return
		}
		name := strings.ToLower(args[0])
		if k := p.every.Load(); k > 0 && (name == "evalsha" || name == "eval") && p.scripts.Add(1)%k == 0 {
			if !p.garbage.Load() {
				_, _ = io.Copy(io.Discard, c) // stall until the client gives up
				return
			}
			reply = []byte("+garbage\r\n")
		}
		if _, err := c.Write(reply); err != nil {
			return
		}
	}
}

// readReply appends one whole RESP2 or RESP3 reply from r to dst.
func readReply(r *bufio.Reader, dst []byte) ([]byte, error) {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return dst, err
	}
	dst = append(dst, line...)
	if len(line) < 3 {
		return dst, fmt.Errorf("short reply line %q", line)
	}
	n, _ := strconv.Atoi(string(line[1 : len(line)-2]))
	switch line[0] {
	case '$', '!', '=':
		if n < 0 {
			return dst, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return dst, err
		}
		return append(dst, buf...), nil
	case '*', '~', '>', '%', '|':
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		for range max(n, 0) {
			if dst, err = readReply(r, dst); err != nil {
				return dst, err
			}
		}
		if line[0] == '|' { // attributes precede the reply they describe
			return readReply(r, dst)
		}
	}
	return dst, nil
}
