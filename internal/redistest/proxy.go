package redistest

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Mode is what a Proxy does with the traffic it carries.
type Mode int32

const (
	// Pass forwards bytes both ways as they come.
	Pass Mode = iota
	// Delay forwards bytes both ways after holding each chunk for the
	// proxy's delay (so a request and its reply are each delayed).
	Delay
	// Blackhole accepts connections and reads what clients send, but never
	// forwards it and never replies: the client waits until its timeout.
	Blackhole
	// Drop closes every open connection and every new one at once (as a
	// crashed server whose host still answers would).
	Drop
)

// String returns the mode's name.
func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Delay:
		return "delay"
	case Blackhole:
		return "blackhole"
	case Drop:
		return "drop"
	}
	return "unknown"
}

// Proxy is a loopback TCP proxy in front of a server whose behaviour can be
// switched at run time, to simulate a slow, silent or failing Redis. Safe
// for concurrent use.
type Proxy struct {
	// Addr is the address clients dial, host:port on 127.0.0.1.
	Addr string

	target string
	ln     net.Listener
	mode   atomic.Int32
	delay  atomic.Int64
	done   chan struct{}
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// StartProxy starts a Proxy in Pass mode on a free loopback port in front
// of target. The test's cleanup stops it (see Close).
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: proxy listen: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln,
		done: make(chan struct{}), conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// SetMode switches the proxy to m; Drop closes every open connection.
func (p *Proxy) SetMode(m Mode) {
	p.mode.Store(int32(m))
	if m == Drop {
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	}
}

// SetDelay sets the delay of Delay mode and switches to it.
func (p *Proxy) SetDelay(d time.Duration) {
	p.delay.Store(int64(d))
	p.SetMode(Delay)
}

// Mode returns the current mode.
func (p *Proxy) Mode() Mode { return Mode(p.mode.Load()) }

// Close stops the proxy: it closes the listener and every connection and
// waits for its goroutines. It is idempotent.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.done)
	p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// track registers c, or closes it and returns false if the proxy is closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve carries one client connection.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	defer p.untrack(c)
	if p.Mode() == Drop {
		return
	}
	up, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		if p.Mode() == Blackhole {
			_, _ = io.Copy(io.Discard, c) // accept and never answer
		}
		return
	}
	if !p.track(up) {
		return
	}
	defer p.untrack(up)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.pump(up, c)
		c.Close()
		up.Close()
	}()
	p.pump(c, up)
	c.Close()
	up.Close()
}

// pump copies src to dst chunk by chunk, applying the mode in force when
// each chunk arrives, until either side closes.
func (p *Proxy) pump(src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			switch p.Mode() {
			case Drop:
				return
			case Blackhole:
				continue
			case Delay:
				t := time.NewTimer(time.Duration(p.delay.Load()))
				select {
				case <-p.done:
					t.Stop()
					return
				case <-t.C:
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
