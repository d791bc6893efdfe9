package service_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/service"
)

// replies sends raw on one connection and reads every reply the server
// writes until it closes the connection (or a few seconds pass).
func replies(t *testing.T, base, raw string) []int {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	var statuses []int
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return statuses
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		statuses = append(statuses, resp.StatusCode)
	}
}

// TestAmbiguousFramingIsRefusedAndCloses: a request whose length two
// readers could read two ways — Content-Length and Transfer-Encoding
// both, in either order, or a Transfer-Encoding folded onto a second line
// — is answered 400 (501 for a
// coding the server does not know) and its connection closed: what its Content-Length
// covered is never served as a request of its own (RFC 9112, 6.1 and 5.2).
// Plain chunked and plain Content-Length requests are served as before.
// On both servers, over raw TCP.
func TestAmbiguousFramingIsRefusedAndCloses(t *testing.T) {
	for _, server := range []string{service.HTTPServerFast, service.HTTPServerNet} {
		t.Run(server, func(t *testing.T) {
			a := startApp(t, service.Config{DatabaseURL: dbtest.SQLiteURL(t), HTTPServer: server, SampleEvery: -1})
			a.createSale("s1", 100, "A", 100)
			host := "Host: " + strings.TrimPrefix(a.svc.URL(), "http://") + "\r\n"
			auth := "Authorization: Bearer " + a.token("alice") + "\r\n"
			buy := `{"items":[{"sku":"A","qty":1}]}`
			// Chunked, the body ends at the last chunk and the GET is a
			// second request; by the Content-Length, the GET is the body.
			chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(buy), buy)
			smuggled := "GET /healthz HTTP/1.1\r\n" + host + "\r\n"
			cl := fmt.Sprintf("Content-Length: %d\r\n", len(chunked)+len(smuggled))
			for _, c := range []struct{ name, headers string }{
				{"length then chunked", cl + "Transfer-Encoding: chunked\r\n"},
				{"chunked then length", "Transfer-Encoding: chunked\r\n" + cl},
				{"folded chunked and length", "Transfer-Encoding:\r\n chunked\r\n" + cl},
				{"length and folded chunked", cl + "Transfer-Encoding: identity,\r\n\tchunked\r\n"},
				{"folded chunked", "Transfer-Encoding:\r\n chunked\r\n"},
			} {
				got := replies(t, a.svc.URL(), "POST /v1/sales/s1/orders HTTP/1.1\r\n"+host+auth+c.headers+"\r\n"+chunked+smuggled)
				// 501: a coding the server does not know (its own answer, as
				// RFC 9112 asks), closing too.
				if len(got) != 1 || got[0] != http.StatusBadRequest && got[0] != http.StatusNotImplemented {
					t.Errorf("%s: replies %v; want one 400 and the connection closed", c.name, got)
				}
			}
			// Unambiguous framing is served as before.
			plain := fmt.Sprintf("Content-Length: %d\r\n", len(buy))
			if got := replies(t, a.svc.URL(), "POST /v1/sales/s1/orders HTTP/1.1\r\n"+host+auth+plain+"\r\n"+buy+
				"GET /healthz HTTP/1.1\r\n"+host+"Connection: close\r\n\r\n"); fmt.Sprint(got) != "[201 200]" {
				t.Errorf("a buy and a health check on one connection: replies %v, want [201 200]", got)
			}
			if got := replies(t, a.svc.URL(), "POST /v1/sales/s1/orders HTTP/1.1\r\n"+host+auth+
				"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"+chunked); fmt.Sprint(got) != "[201]" {
				t.Errorf("a chunked buy: replies %v, want [201]", got)
			}
		})
	}
}
