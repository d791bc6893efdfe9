package service_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// rawReply sends req, as it is, on a new connection to base's host and
// reads one reply: its status and body.
func rawReply(t *testing.T, base, req string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", req, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestFastHTTPRawRequestTargetsMatchNetHTTP: request-targets a Go client
// never sends (a fragment, dot segments, double slashes, absolute form,
// bytes the sale id does not allow), written raw to net/http and to
// fasthttp, each buyer its own: the same status, and the buy path taken
// on fasthttp only where net/http takes it. A fragment once bought on
// fasthttp (its path is the part before '#') where net/http answers 404.
func TestFastHTTPRawRequestTargetsMatchNetHTTP(t *testing.T) {
	a, netURL := startFastApp(t, realStack(t))
	a.createSale("raw-s", 100, "A", 1000)
	a.createSale("raw-t", 100, "A", 1000)
	body := `{"items":[{"sku":"A","qty":1}]}`
	targets := []string{
		"/v1/sales/raw-s/orders#x",
		"/v1/sales/raw-t#/../raw-s/orders",
		"/v1/sales/raw-t/orders#/../../raw-s/orders",
		"//v1/sales/raw-s/orders",
		"/v1/sales/raw-t/../raw-s/orders",
		"/v1/sales/./orders",
		"/v1/sales/raw-s;x/orders",
		"/v1/sales/raw-s\\..\\raw-t/orders",
		"http://example.com/v1/sales/raw-s/orders",
		"/v1/sales/raw-s/orders?x=#y",
	}
	servers := []struct{ tag, url string }{{"n", netURL}, {"f", a.svc.URL()}}
	for i, target := range targets {
		var got [2]string
		for j, s := range servers {
			user := fmt.Sprintf("raw-%s-%d", s.tag, i)
			req := "POST " + target + " HTTP/1.1\r\nHost: " + strings.TrimPrefix(s.url, "http://") +
				"\r\nAuthorization: Bearer " + a.token(user) + "\r\nContent-Length: " + fmt.Sprint(len(body)) +
				"\r\nConnection: close\r\n\r\n" + body
			status, b := rawReply(t, s.url, req)
			// The reply but for the order's id, time and stock, and the buyer.
			if status == http.StatusCreated {
				b = b[strings.Index(b, `"sale_id"`):strings.Index(b, `"user_id"`)]
			}
			got[j] = fmt.Sprintf("%d %s", status, strings.ReplaceAll(b, user, "{user}"))
		}
		if got[0] != got[1] {
			t.Errorf("POST %s:\n net/http: %s\n fasthttp: %s", target, got[0], got[1])
		}
	}
}
