package redistest

import (
	"bufio"
	"io"
	"net"
	"strings"
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
	// HoldReplies forwards requests to the server, which applies them,
	// but holds its replies: of the first reply chunk a connection gets
	// in this mode only the first half is forwarded, so the client is
	// left mid-reply, and the rest waits. Leaving the mode (SetMode)
	// forwards what was held, on the connections the clients kept open.
	// A command proxy does not take this mode (it treats it as Pass).
	HoldReplies
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
	case HoldReplies:
		return "hold_replies"
	}
	return "unknown"
}

// Tamper is what a command proxy (StartCommandProxy) does to the replies
// of script calls (EVALSHA, EVAL) it picks (see SetTamper). Every tampered
// command has reached the server: Redis ran it.
type Tamper int32

const (
	// Stall never answers the command and never reads the connection
	// again: the client times out and drops it.
	Stall Tamper = iota + 1
	// Garbage answers +garbage instead of the reply.
	Garbage
	// Cut closes the connection instead of answering: the client sees
	// the connection break after sending the command (and go-redis, with
	// retries on, sends it again).
	Cut
)

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

	// command proxies only (StartCommandProxy)
	commands bool
	every    atomic.Int64 // tamper with every k-th script reply; 0: none
	tamper   atomic.Int32 // how
	scripts  atomic.Int64 // script replies seen

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	held   chan struct{} // closed when HoldReplies ends; nil outside it
	closed bool
}

// StartProxy starts a Proxy in Pass mode on a free loopback port in front
// of target. The test's cleanup stops it (see Close).
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	return startProxy(t, target, false)
}

// StartCommandProxy starts a Proxy that carries RESP commands one at a
// time, each with its whole reply, so it can tamper with chosen replies
// (SetTamper); its modes apply per command (Delay holds each command,
// Blackhole swallows it, Drop closes the connection).
func StartCommandProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	return startProxy(t, target, true)
}

// SetTamper tampers, the way how says, with every k-th reply to a script
// call from now on, counting script replies since the proxy started; k 0
// passes every reply. It works on a command proxy only.
func (p *Proxy) SetTamper(k int, how Tamper) {
	p.tamper.Store(int32(how))
	p.every.Store(int64(k))
}

// Scripts returns how many script replies a command proxy has seen.
func (p *Proxy) Scripts() int64 { return p.scripts.Load() }

func startProxy(t testing.TB, target string, commands bool) *Proxy {
	t.Helper()
	p, err := newProxy(target, commands)
	if err != nil {
		t.Fatalf("redistest: proxy listen: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// NewProxy starts a Proxy in Pass mode on a free loopback port in front of
// target, for programs that are not tests (the bench module's fault
// harness); the caller stops it with Close.
func NewProxy(target string) (*Proxy, error) {
	return newProxy(target, false)
}

func newProxy(target string, commands bool) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln,
		done: make(chan struct{}), conns: make(map[net.Conn]struct{}), commands: commands}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// SetMode switches the proxy to m; Drop closes every open connection;
// leaving HoldReplies forwards the replies it held.
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode.Store(int32(m))
	switch {
	case m == HoldReplies && p.held == nil:
		p.held = make(chan struct{})
	case m != HoldReplies && p.held != nil:
		close(p.held)
		p.held = nil
	}
	if m == Drop {
		for c := range p.conns {
			c.Close()
		}
	}
}

// holding returns the channel that closes when HoldReplies ends, or nil
// outside that mode.
func (p *Proxy) holding() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
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
	if p.commands {
		p.carry(c, up)
		return
	}
	gone := make(chan struct{}) // the client's side ended
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.pump(up, c, gone)
		c.Close()
		up.Close()
	}()
	p.pump(c, up, nil)
	close(gone)
	c.Close()
	up.Close()
}

// pump copies src to dst chunk by chunk, applying the mode in force when
// each chunk arrives, until either side closes. replies is nil for the
// requests' direction; for the replies' it is closed when the requests'
// pump ends (the client left), which ends a hold.
func (p *Proxy) pump(src, dst net.Conn, replies chan struct{}) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			out := buf[:n]
			switch p.Mode() {
			case Drop:
				return
			case Blackhole:
				continue
			case Delay:
				if !p.wait(time.Duration(p.delay.Load())) {
					return
				}
			case HoldReplies:
				if replies != nil {
					var ok bool
					if out, ok = p.hold(dst, out, replies); !ok {
						return
					}
				}
			}
			if _, werr := dst.Write(out); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// hold forwards the first half of reply chunk out to dst and waits until
// HoldReplies ends; it returns the rest to forward, and false if the
// proxy closed, the client left or dst failed meanwhile.
func (p *Proxy) hold(dst net.Conn, out []byte, gone chan struct{}) ([]byte, bool) {
	held := p.holding()
	if held == nil {
		return out, true // the mode ended since the chunk arrived
	}
	if len(out) > 1 {
		half := len(out) / 2
		if _, err := dst.Write(out[:half]); err != nil {
			return nil, false
		}
		out = out[half:]
	}
	select {
	case <-held:
		return out, true
	case <-gone:
	case <-p.done:
	}
	return nil, false
}

// carry forwards commands from c to up one at a time, each reply whole,
// applying the mode and the tampering in force when each command arrives.
func (p *Proxy) carry(c, up net.Conn) {
	rc, ru := bufio.NewReader(c), bufio.NewReader(up)
	var reply []byte
	for {
		args, err := ReadCommand(rc)
		if err != nil || len(args) == 0 {
			return
		}
		switch p.Mode() {
		case Drop:
			return
		case Blackhole:
			continue
		case Delay:
			if !p.wait(time.Duration(p.delay.Load())) {
				return
			}
		}
		if _, err := up.Write(AppendCommand(nil, args...)); err != nil {
			return
		}
		if reply, err = ReadReply(ru, reply[:0]); err != nil {
			return
		}
		name := strings.ToLower(args[0])
		if name == "evalsha" || name == "eval" {
			n := p.scripts.Add(1)
			if k := p.every.Load(); k > 0 && n%k == 0 {
				switch Tamper(p.tamper.Load()) {
				case Stall:
					_, _ = io.Copy(io.Discard, c) // until the client gives up
					return
				case Cut:
					return
				case Garbage:
					reply = append(reply[:0], "+garbage\r\n"...)
				}
			}
		}
		if _, err := c.Write(reply); err != nil {
			return
		}
	}
}

// wait waits d, and reports false if the proxy closed meanwhile.
func (p *Proxy) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return false
	case <-t.C:
		return true
	}
}
