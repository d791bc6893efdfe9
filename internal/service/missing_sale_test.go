package service_test

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/service"
	"github.com/seckill/seckill/internal/waitfor"
)

// statementCounter is a TCP proxy in front of PostgreSQL that counts the
// statements its clients run: simple queries ('Q') and executions of
// extended-protocol portals ('E').
type statementCounter struct {
	n      atomic.Int64
	ln     net.Listener
	target string
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

// countStatements puts a statementCounter in front of the database of
// dbURL and returns the URL that goes through it.
func countStatements(t *testing.T, dbURL string) (string, *statementCounter) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &statementCounter{ln: ln, target: u.Host}
	c.wg.Add(1)
	go c.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		c.mu.Lock()
		for _, conn := range c.conns {
			_ = conn.Close()
		}
		c.mu.Unlock()
		c.wg.Wait()
	})
	u.Host = ln.Addr().String()
	return u.String(), c
}

func (c *statementCounter) accept() {
	defer c.wg.Done()
	for {
		client, err := c.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", c.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		c.mu.Lock()
		c.conns = append(c.conns, client, server)
		c.mu.Unlock()
		c.wg.Add(2)
		go func() { defer c.wg.Done(); _, _ = io.Copy(client, server); _ = client.Close() }()
		go func() { defer c.wg.Done(); c.forward(server, client); _ = server.Close() }()
	}
}

// forward copies a client's messages to the server, counting statements:
// the startup message (after any SSL or GSS encryption request) has no
// type byte; every message after it does.
func (c *statementCounter) forward(dst io.Writer, src io.Reader) {
	r := bufio.NewReader(src)
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		n, code := binary.BigEndian.Uint32(hdr[:4]), binary.BigEndian.Uint32(hdr[4:])
		if _, err := dst.Write(hdr[:]); err != nil {
			return
		}
		if _, err := io.CopyN(dst, r, int64(n)-8); err != nil {
			return
		}
		if code != 80877103 && code != 80877104 { // not SSLRequest, GSSENCRequest
			break
		}
	}
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		if hdr[0] == 'Q' || hdr[0] == 'E' {
			c.n.Add(1)
		}
		if _, err := dst.Write(hdr[:]); err != nil {
			return
		}
		if _, err := io.CopyN(dst, r, int64(binary.BigEndian.Uint32(hdr[1:]))-4); err != nil {
			return
		}
	}
}

// TestMissingSaleIsThrottledAndNotLookedUpEachTime: 500 back-to-back buys,
// then 500 purchase-token requests, of a sale that does not exist, each
// from one buyer: after the buyer's burst the answer is 429 (the per-user limit is
// not skipped because the sale is missing), and the database is asked a
// bounded number of times, not once or twice a request. A sale created
// right after is bought at once on the instance that created it, and
// within moments on another that had just been told it was missing.
func TestMissingSaleIsThrottledAndNotLookedUpEachTime(t *testing.T) {
	rdb := redistest.Standalone(t)
	dbURL, statements := countStatements(t, dbtest.PostgresURL(t))
	cfg := service.Config{RedisURL: "redis://" + rdb.Options().Addr + "/0", KeyPrefix: redistest.Prefix(t, rdb),
		DatabaseURL: dbURL, SampleEvery: -1, ExpireEvery: -1, ArchiveEvery: -1, DegradedTick: -1}
	a := startApp(t, cfg)
	other := startApp(t, cfg)
	for i, path := range []string{"/v1/sales/nosuch/orders", "/v1/sales/nosuch/purchase-tokens"} {
		mallory := a.token(fmt.Sprint("mallory", i))
		before := statements.n.Load()
		statuses := map[int]int{}
		for range 500 {
			statuses[a.call("POST", path, mallory, buyBody("A")).status]++
		}
		ran := statements.n.Load() - before
		t.Logf("%s: statuses %v, %d statements", path, statuses, ran)
		if statuses[http.StatusTooManyRequests] == 0 || statuses[http.StatusNotFound]+statuses[http.StatusTooManyRequests] != 500 {
			t.Errorf("%s: 500 requests for a missing sale answered %v; want 404s, then 429s", path, statuses)
		}
		// 500 lookups would run 1,000 statements or more; the background
		// loops left running (the order consumer) run a few.
		if ran > 100 {
			t.Errorf("%s: 500 requests for a missing sale ran %d statements in the database", path, ran)
		}
	}

	// A sale created right after is buyable at once where it was created.
	bob := a.token("bob")
	mustStatus(t, a.call("POST", "/v1/sales/later/orders", bob, buyBody("A")), http.StatusNotFound)
	mustStatus(t, other.call("POST", "/v1/sales/later/orders", bob, buyBody("A")), http.StatusNotFound)
	a.createSale("later", 5, "A", 10)
	mustStatus(t, a.call("POST", "/v1/sales/later/orders", bob, buyBody("A")), http.StatusCreated)
	// And soon on the instance that had heard it was missing.
	carol := a.token("carol")
	waitfor.Until(t, waitfor.Patience, "the other instance sells the new sale", func() error {
		if r := other.call("POST", "/v1/sales/later/orders", carol, buyBody("A")); r.status != http.StatusCreated {
			return fmt.Errorf("status %d: %s", r.status, r.body)
		}
		return nil
	})
}
