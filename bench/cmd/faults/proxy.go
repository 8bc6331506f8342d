package main

import (
	"net"
	"sync"
	"time"
)

// proxy is a loopback TCP proxy in front of a redis-server that can stall
// the replies: while stalled, requests still reach the server (which
// applies them) but its replies are held; the first reply chunk of every
// connection that arrives during a stall is cut in half and only its first
// half forwarded, so the client is left mid-reply. When the stall ends the
// held bytes are forwarded, to the connections the clients kept open.
type proxy struct {
	addr   string
	target string
	ln     net.Listener

	mu      sync.Mutex
	stalled chan struct{} // closed when the current stall ends; nil if none
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// startProxy listens on a free loopback port and forwards to target.
func startProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// stall holds every reply until resume.
func (p *proxy) stall() {
	p.mu.Lock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
	p.mu.Unlock()
}

// resume forwards the held replies and everything after them.
func (p *proxy) resume() {
	p.mu.Lock()
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
	p.mu.Unlock()
}

// gate returns the channel that closes when the current stall ends, or
// nil if replies flow.
func (p *proxy) gate() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stalled
}

// close stops the proxy: the listener and every connection; it waits for
// its goroutines.
func (p *proxy) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// track registers c, or closes it and returns false if the proxy is closed.
func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *proxy) accept() {
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

// serve carries one client connection until either side closes.
func (p *proxy) serve(c net.Conn) {
	defer p.wg.Done()
	defer p.untrack(c)
	up, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil || !p.track(up) {
		return
	}
	defer p.untrack(up)
	gone := make(chan struct{})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.replies(up, c, gone)
		c.Close()
		up.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := up.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	close(gone)
	c.Close()
	up.Close()
}

// replies copies the server's replies to the client, holding them while
// the proxy is stalled (see proxy), until either side closes.
func (p *proxy) replies(up, c net.Conn, gone chan struct{}) {
	buf := make([]byte, 32<<10)
	for {
		n, err := up.Read(buf)
		if n > 0 {
			out := buf[:n]
			if g := p.gate(); g != nil {
				half := (n + 1) / 2
				if n > 1 {
					if _, werr := c.Write(out[:n-half]); werr != nil {
						return
					}
					out = out[n-half:]
				}
				select {
				case <-g:
				case <-gone:
					return
				}
			}
			if _, werr := c.Write(out); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
