package service_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/service"
)

// TestAdvLegitFramingIsServed: requests whose framing reads one way only
// are served, whatever else they carry: several in one write (pipelined),
// HTTP/1.0, lowercase names, a header value that names Transfer-Encoding,
// a Content-Length with a long run of optional white space, a chunked
// body with extensions and a trailer. On both servers, over raw TCP.
func TestAdvLegitFramingIsServed(t *testing.T) {
	for _, server := range []string{service.HTTPServerFast, service.HTTPServerNet} {
		t.Run(server, func(t *testing.T) {
			a := startApp(t, service.Config{DatabaseURL: dbtest.SQLiteURL(t), HTTPServer: server, SampleEvery: -1, RateLimitUser: "off"})
			a.createSale("s1", 100, "A", 1000)
			host := "Host: " + strings.TrimPrefix(a.svc.URL(), "http://") + "\r\n"
			buy := `{"items":[{"sku":"A","qty":1}]}`
			auth := func(u string) string { return "Authorization: Bearer " + a.token(u) + "\r\n" }
			post := func(u, extra string) string {
				return "POST /v1/sales/s1/orders HTTP/1.1\r\n" + host + auth(u) + extra +
					fmt.Sprintf("Content-Length: %d\r\n\r\n", len(buy)) + buy
			}
			health := "GET /healthz HTTP/1.1\r\n" + host + "\r\n"
			last := "GET /healthz HTTP/1.1\r\n" + host + "Connection: close\r\n\r\n"
			cases := []struct{ name, raw, want string }{
				{"pipelined", post("p1", "") + health + post("p2", "") + post("p3", "") + last, "[201 200 201 201 200]"},
				{"a value naming the codings", post("v1", "X-Note: transfer-encoding: chunked; content-length: 9\r\n") + last, "[201 200]"},
				{"lowercase", "POST /v1/sales/s1/orders HTTP/1.1\r\n" + strings.ToLower(host) + "authorization: Bearer " + a.token("l1") + "\r\n" +
					fmt.Sprintf("content-length: %d\r\n\r\n", len(buy)) + buy + last, "[201 200]"},
				{"long white space", "POST /v1/sales/s1/orders HTTP/1.1\r\n" + host + auth("w1") +
					"Content-Length:" + strings.Repeat(" ", 70) + fmt.Sprint(len(buy)) + "\r\n\r\n" + buy + last, "[201 200]"},
				{"chunk extension and trailer", "POST /v1/sales/s1/orders HTTP/1.1\r\n" + host + auth("c1") + "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
					fmt.Sprintf("%x;ext=1\r\n%s\r\n0\r\nX-Trailer: 1\r\n\r\n", len(buy), buy), "[201]"},
				{"http/1.0", "POST /v1/sales/s1/orders HTTP/1.0\r\n" + host + auth("h1") + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(buy)) + buy, "[201]"},
				{"http/1.0 keep-alive", "POST /v1/sales/s1/orders HTTP/1.0\r\n" + host + auth("h2") + "Connection: keep-alive\r\n" +
					fmt.Sprintf("Content-Length: %d\r\n\r\n", len(buy)) + buy + "GET /healthz HTTP/1.0\r\n\r\n", "[201 200]"},
			}
			for _, c := range cases {
				if got := fmt.Sprint(replies(t, a.svc.URL(), c.raw)); got != c.want {
					t.Errorf("%s: replies %s, want %s", c.name, got, c.want)
				}
			}
		})
	}
}

// TestAdvBodiesAfterTheToken: bodies the buy handler reads itself after
// the token's check (streamed on fasthttp): too large by Content-Length or
// by chunks, cut short, sent slowly, empty — each a 4xx or a 201, never a
// 5xx, and a request pipelined after a refused body is still answered or
// the connection closed (never taken from the refused body's bytes).
func TestAdvBodiesAfterTheToken(t *testing.T) {
	for _, server := range []string{service.HTTPServerFast, service.HTTPServerNet} {
		t.Run(server, func(t *testing.T) {
			a := startApp(t, service.Config{DatabaseURL: dbtest.SQLiteURL(t), HTTPServer: server, SampleEvery: -1, RateLimitUser: "off"})
			a.createSale("s1", 100, "A", 1000)
			host := "Host: " + strings.TrimPrefix(a.svc.URL(), "http://") + "\r\n"
			auth := func(u string) string { return "Authorization: Bearer " + a.token(u) + "\r\n" }
			start := func(u string) string { return "POST /v1/sales/s1/orders HTTP/1.1\r\n" + host + auth(u) }
			buy := `{"items":[{"sku":"A","qty":1}]}`
			// A body that is JSON padded past 64 KiB; inside it, a request
			// that must never be served.
			inner := "GET /healthz HTTP/1.1\r\n" + host + "\r\n"
			big := `{"items":[{"sku":"A","qty":1}],"pad":"` + strings.Repeat("x", 100<<10) + inner + `"}`
			last := "GET /healthz HTTP/1.1\r\n" + host + "Connection: close\r\n\r\n"
			chunk := func(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }
			cases := []struct{ name, raw string }{
				{"large by length", start("b1") + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(big)) + big + last},
				{"large by chunks", start("b2") + "Transfer-Encoding: chunked\r\n\r\n" + chunk(big[:50<<10]) + chunk(big[50<<10:]) + "0\r\n\r\n" + last},
				{"empty", start("b3") + "Content-Length: 0\r\n\r\n" + last},
				{"garbage", start("b4") + "Content-Length: 5\r\n\r\n\x00\xff{[\"" + last},
				{"wrong type", start("b5") + "Content-Type: text/plain\r\n" + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(buy)) + buy + last},
				{"no token, large", "POST /v1/sales/s1/orders HTTP/1.1\r\n" + host + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(big)) + big + last},
			}
			for _, c := range cases {
				got := replies(t, a.svc.URL(), c.raw)
				if len(got) == 0 || got[0] >= 500 || got[0] < 400 && got[0] != 201 {
					t.Errorf("%s: replies %v", c.name, got)
				}
				for _, st := range got[1:] {
					if st != 200 {
						t.Errorf("%s: replies %v: a second reply that is not the health check's", c.name, got)
					}
				}
				if len(got) > 2 {
					t.Errorf("%s: replies %v: the body's bytes were served as a request", c.name, got)
				}
			}
		})
	}
}
