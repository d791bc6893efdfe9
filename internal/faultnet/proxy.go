// Package faultnet puts a TCP proxy between a client and a server on
// loopback, so a test can cut the connection and restore it: a real network
// failure for the client's driver, not a simulated error.
package faultnet

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards connections from its own loopback address to a target.
type Proxy struct {
	target string
	ln     net.Listener
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup

	dropReplies atomic.Bool
	held        chan struct{} // closed when HoldReplies(false) releases the replies held; nil: none held
	heldReqs    chan struct{} // closed when HoldRequests(false) releases the requests held; nil: none held
	holdAfter   []byte        // HoldRepliesAfter's pattern; nil: none
}

// Start listens on a free loopback port and forwards to target; it is
// closed in tb.Cleanup.
func Start(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("faultnet: listen: %v", err)
	}
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// Addr is the proxy's "host:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every open connection and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// Restore accepts connections again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// DropReplies makes the proxy forward what clients send but discard what
// the target answers, on open connections and new ones, until it is called
// with false: the requests reach the server and run, their replies are lost
// (a partition right after the server received them).
func (p *Proxy) DropReplies(drop bool) { p.dropReplies.Store(drop) }

// HoldReplies makes the proxy forward what clients send but keep what the
// target answers until it is called with false, when the replies go on
// their way: requests run at once, their replies arrive late.
func (p *Proxy) HoldReplies(hold bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case hold && p.held == nil:
		p.held = make(chan struct{})
	case !hold && p.held != nil:
		close(p.held)
		p.held = nil
	}
}

// HoldRequests makes the proxy keep what clients send until it is called
// with false, when the requests go on to the target, even those of
// clients that gave up on them meanwhile: requests stuck in the network
// that arrive late, after their callers' timeouts.
func (p *Proxy) HoldRequests(hold bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case hold && p.heldReqs == nil:
		p.heldReqs = make(chan struct{})
	case !hold && p.heldReqs != nil:
		close(p.heldReqs)
		p.heldReqs = nil
	}
}

// HoldRepliesAfter makes the proxy hold the replies, as HoldReplies(true)
// does, from the moment a client sends pattern (at most 64 bytes; on any
// connection, once):
// the request that carries it reaches the target and runs, and its reply
// and every later one wait until HoldReplies(false). A process that sends a
// given command is so stopped right after it, as if it died there.
func (p *Proxy) HoldRepliesAfter(pattern []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holdAfter = bytes.Clone(pattern)
}

// sees reports whether what a client sends, seen is what it sent just
// before (the pattern may span two reads), carries HoldRepliesAfter's
// pattern; if so it holds the replies from now on.
func (p *Proxy) sees(seen, chunk []byte) bool {
	p.mu.Lock()
	pattern := p.holdAfter
	p.mu.Unlock()
	if pattern == nil || !bytes.Contains(append(bytes.Clone(seen), chunk...), pattern) {
		return false
	}
	p.mu.Lock()
	p.holdAfter = nil
	p.mu.Unlock()
	p.HoldReplies(true)
	return true
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.HoldReplies(false)
	p.HoldRequests(false)
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			_ = client.Close()
			continue
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			_ = client.Close()
			continue
		}
		p.conns[client], p.conns[server] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(server, client, false)
		go p.pipe(client, server, true)
	}
}

// pipe copies src to dst until either side closes, or Cut closes both;
// replies (what the target answers) are dropped or held as asked, and
// requests held as asked.
func (p *Proxy) pipe(dst, src net.Conn, replies bool) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	var seen []byte // the end of what the client sent, for HoldRepliesAfter
	for {
		n, err := src.Read(buf)
		if !replies && n > 0 && !p.sees(seen, buf[:n]) {
			seen = append(seen, buf[:n]...)
			seen = seen[max(0, len(seen)-64):]
		}
		p.mu.Lock()
		held := p.heldReqs
		if replies {
			held = p.held
		}
		p.mu.Unlock()
		if held != nil && (replies || n > 0) {
			<-held
		}
		if n > 0 && (!replies || !p.dropReplies.Load()) {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}
