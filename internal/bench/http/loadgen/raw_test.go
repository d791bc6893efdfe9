package loadgen

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestRawClientRequest: the request arrives as net/http's server reads it:
// method, path and query, the fixed headers, the token and the body; and
// the connections are reused.
func TestRawClientRequest(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.URL.Path != "/v1/sales/s1/orders" || r.URL.RawQuery != "x=1" ||
			r.Header.Get("X-Test") != "yes" || r.Header.Get("Authorization") != "Bearer tok" || string(body) != `{"a":1}` {
			t.Errorf("got %s %s %v %q", r.Method, r.URL, r.Header, body)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c, err := newRawClient(http.MethodPost, srv.URL+"/v1/sales/s1/orders?x=1", http.Header{"X-Test": {"yes"}},
		[]byte(`{"a":1}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn := c.conn()
	defer conn.close()
	for range 20 {
		if status, err := conn.do("tok", "", time.Now()); status != http.StatusCreated || err != nil {
			t.Fatalf("status %d, err %v; want 201", status, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for 20 requests one at a time, want 1 (kept alive)", n)
	}
}

// TestReadReply: the framings of a reply's body, each followed by a
// second reply on the same connection that must parse too.
func TestReadReply(t *testing.T) {
	next := "HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\nok"
	cases := []struct {
		name   string
		reply  string
		status int
		keep   bool
		err    error
	}{
		{"length", "HTTP/1.1 201 Created\r\nContent-Length: 5\r\ncontent-type: x\r\n\r\nhello", 201, true, nil},
		{"chunked", "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n3\r\nabc\r\n0\r\nX-Trailer: 1\r\n\r\n", 200, true, nil},
		{"no content", "HTTP/1.1 204 No Content\r\n\r\n", 204, true, nil},
		{"close", "HTTP/1.1 409 Conflict\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx", 409, false, nil},
		{"http/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx", 200, false, nil},
		{"to the end", "HTTP/1.1 200 OK\r\n\r\nuntil closed", 200, false, nil},
		{"interim", "HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\nx", 201, true, nil},
		{"not http", "SSH-2.0-x\r\n\r\n", 0, false, errMalformed},
		{"bad status", "HTTP/1.1 2x0 OK\r\n\r\n", 0, false, errMalformed},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", 0, false, errMalformed},
		{"bad header", "HTTP/1.1 200 OK\r\nno colon\r\n\r\n", 0, false, errMalformed},
		{"bad chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 0, false, errMalformed},
		{"cut short", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 0, false, io.EOF},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			text := tc.reply
			if tc.keep {
				text += next
			}
			r := bufio.NewReader(strings.NewReader(text))
			status, keep, err := readReply(r)
			if status != tc.status || keep != tc.keep || !errors.Is(err, tc.err) {
				t.Fatalf("status %d keep %v err %v; want %d %v %v", status, keep, err, tc.status, tc.keep, tc.err)
			}
			if tc.keep {
				if status, keep, err := readReply(r); status != 202 || !keep || err != nil {
					t.Errorf("the next reply: status %d keep %v err %v; want 202 true nil", status, keep, err)
				}
			}
		})
	}
}

// TestRawClientReconnects: a server that closes every connection after
// one reply (Connection: close) and one that stalls past the timeout. The
// connection dials anew after a close, and a stalled request is a timeout
// error, after which the connection dials anew too.
func TestRawClientReconnects(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			n := accepted.Add(1)
			go func() {
				defer nc.Close()
				r := bufio.NewReader(nc)
				if _, err := http.ReadRequest(r); err != nil {
					return
				}
				if n == 3 { // stall
					time.Sleep(2 * time.Second)
					return
				}
				_, _ = io.WriteString(nc, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
			}()
		}
	}()
	const timeout = 300 * time.Millisecond
	c, err := newRawClient(http.MethodGet, "http://"+ln.Addr().String()+"/", nil, nil, timeout)
	if err != nil {
		t.Fatal(err)
	}
	conn := c.conn()
	defer conn.close()
	for i := range 2 {
		if status, err := conn.do("", "", time.Now()); status != 200 || err != nil {
			t.Fatalf("request %d: status %d err %v", i, status, err)
		}
	}
	sent := time.Now()
	_, err = conn.do("", "", sent)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("stalled request: err %v, want a timeout", err)
	}
	if waited := time.Since(sent); waited < timeout {
		t.Errorf("the stalled request timed out after %v, before its timeout %v", waited, timeout)
	}
	if status, err := conn.do("", "", time.Now()); status != 200 || err != nil {
		t.Fatalf("after the timeout: status %d err %v (the connection must dial anew)", status, err)
	}
	if n := accepted.Load(); n != 4 {
		t.Errorf("%d connections, want 4 (one per request: the server closes each)", n)
	}
}
