package service_test

import (
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/service"
)

// sendRaw writes req, as it is, on a new connection to base and reads
// whatever comes back until the server closes or a few seconds pass.
func sendRaw(t *testing.T, base, req string) string {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(c)
	return string(b)
}

// debugLogApp starts the service on server, on SQLite, logging as text at
// debug level into the buffer it returns.
func debugLogApp(t *testing.T, server string) (*app, *syncBuffer) {
	t.Helper()
	buf := &syncBuffer{}
	a := startApp(t, service.Config{DatabaseURL: dbtest.SQLiteURL(t), HTTPServer: server, SampleEvery: -1,
		Logger: slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	return a, buf
}

// TestUnreadableRequestsLogNoSecrets: requests a server cannot read (a
// space before a header's colon, an unknown transfer coding, no Host, a
// bad chunk, a bad request line...) carrying the admin token, a buyer's
// JWT and a purchase token are refused, and nothing of theirs reaches
// the log, at any level; on both servers. Such lines are bounded too: 100
// bad requests log at most one warning per interval, not one each.
func TestUnreadableRequestsLogNoSecrets(t *testing.T) {
	for _, server := range []string{service.HTTPServerFast, service.HTTPServerNet} {
		t.Run(server, func(t *testing.T) {
			a, buf := debugLogApp(t, server)
			jwt := a.token("alice")
			secrets := map[string]string{"admin token": a.svc.AdminToken(), "buyer JWT": jwt,
				"purchase token": "c2VjcmV0LXB1cmNoYXNlLXRva2Vu.c2ln", "JWT secret": a.svc.JWTSecret()}
			host := "Host: " + strings.TrimPrefix(a.svc.URL(), "http://") + "\r\n"
			creds := "Authorization: Bearer " + jwt + "\r\nX-Purchase-Token: " + secrets["purchase token"] + "\r\n"
			admin := "Authorization: Bearer " + a.svc.AdminToken() + "\r\n"
			bad := []string{
				"POST /v1/sales/s1/orders HTTP/1.1\r\n" + host + "Content-Type : application/json\r\n" + creds + "Content-Length: 2\r\n\r\n{}",
				"POST /v1/admin/sales HTTP/1.1\r\n" + host + "Content-Type : application/json\r\n" + admin + "\r\n",
				"POST /v1/sales/s1/orders HTTP/1.1\r\n" + host + creds + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
				"POST /v1/sales/s1/orders HTTP/1.1\r\n" + creds + "Content-Length: 2\r\n\r\n{}",
				"POST /v1/sales/s1/orders HTTP/1.1\r\n" + host + creds + "Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
				"POST /v1/sales/s1/orders HTTP/1.1\r\n" + host + creds + "Content-Length: 1x\r\n\r\n{}",
				"POST /v1/sales/s1/orders  HTTP/1.1 x\r\n" + host + creds + "\r\n",
				"GET /v1/orders/x HTTP/1.1\r\n" + host + admin + "Bad\x01Header: " + a.svc.AdminToken() + "\r\n\r\n",
				"POST /v1/admin/sales HTTP/1.1\r\n" + host + admin + "X-Long: " + strings.Repeat("x", 30<<10) + "\r\n\r\n",
			}
			for _, req := range bad {
				reply := sendRaw(t, a.svc.URL(), req)
				if !strings.HasPrefix(reply, "HTTP/1.1 4") && !strings.HasPrefix(reply, "HTTP/1.1 5") {
					t.Errorf("%.60q...: answered %.40q, want an error", req, reply)
				}
			}
			logged := buf.String()
			for name, secret := range secrets {
				if strings.Contains(logged, secret) {
					t.Errorf("the %s reached the log:\n%.2000s", name, logged)
				}
			}

			before := strings.Count(buf.String(), "level=WARN")
			began := time.Now()
			for range 100 {
				sendRaw(t, a.svc.URL(), bad[0])
			}
			lines := strings.Count(buf.String(), "level=WARN") - before
			// One line per interval at most, and one more for the interval
			// that began before the burst.
			if bound := 2 + int(time.Since(began)/service.ServerLogEvery); lines > bound {
				t.Fatalf("100 unreadable requests logged %d warnings; at most %d in %v:\n%s",
					lines, bound, time.Since(began), buf.String())
			}
			if server == service.HTTPServerFast && !strings.Contains(buf.String(), "could not be read") {
				t.Fatalf("no unreadable request was logged at all:\n%s", buf.String())
			}
		})
	}
}

// TestDebugLogNamesThePeer: with debug logging on, each request's line
// names the peer's address, on both servers and on both of the fast
// server's paths (a buy, served by the fast handler itself, and another
// request, through the adaptor to net/http's handler).
func TestDebugLogNamesThePeer(t *testing.T) {
	for _, server := range []string{service.HTTPServerFast, service.HTTPServerNet} {
		t.Run(server, func(t *testing.T) {
			a, buf := debugLogApp(t, server)
			a.createSale("s1", 1, "A", 5)
			a.buy("s1", "alice", "A", 1)
			lines := map[string]bool{}
			for line := range strings.Lines(buf.String()) {
				if !strings.Contains(line, "msg=request ") {
					continue
				}
				for _, path := range []string{"/v1/sales/s1/orders", "/v1/admin/sales"} {
					if strings.Contains(line, "path="+path+" ") {
						lines[path] = true
						if !strings.Contains(line, " remote=127.0.0.1:") {
							t.Errorf("the request line of %s names no peer: %s", path, line)
						}
					}
				}
			}
			if len(lines) != 2 {
				t.Errorf("request lines logged of %v, want the buy's and the sale's creation:\n%.3000s", lines, buf.String())
			}
		})
	}
}
