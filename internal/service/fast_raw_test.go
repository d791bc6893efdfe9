package service_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/faultnet"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/service"
	"github.com/seckill/seckill/internal/waitfor"
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

// TestFastHTTPShutdownDrainsOtherRoutes: a request of a route other than
// the buy (through fasthttpadaptor), in flight when Shutdown begins, is
// answered as over net/http: drained, not failed. fasthttpadaptor gives
// the handler the fasthttp RequestCtx as its context, which ends when the
// server begins shutting down: a purchase token's request held in its
// rate limit's Redis call then failed its next Redis call (the stock).
func TestFastHTTPShutdownDrainsOtherRoutes(t *testing.T) {
	for _, server := range []string{service.HTTPServerNet, service.HTTPServerFast} {
		t.Run(server, func(t *testing.T) {
			rdb := redistest.Standalone(t)
			proxy := faultnet.Start(t, rdb.Options().Addr)
			prefix := redistest.Prefix(t, rdb)
			// NodeRecheck: the start-up node check holds through the test (a
			// check is a round trip the proxy would hold too).
			cfg := service.Config{RedisURL: "redis://" + proxy.Addr() + "/0", KeyPrefix: prefix,
				DatabaseURL: dbtest.PostgresURL(t), HTTPServer: server, NodeRecheck: time.Hour}
			a := startApp(t, cfg)
			a.createSale("drain-pt", 1, "A", 100)
			a.call("POST", "/v1/sales/drain-pt/purchase-tokens", a.token("warm"), nil) // the sale's settings cached
			const users = 8
			// Not a.call: it fails the test from its goroutine, and this one
			// waited for ever for that request's result (a request that
			// reached the server only after Shutdown closed it, on a loaded
			// machine).
			results := make(chan error, users)
			proxy.HoldReplies(true)
			for i := range users {
				tok := a.token(fmt.Sprint("drain-pt-", i))
				go func() { results <- postCreated(a.svc.URL()+"/v1/sales/drain-pt/purchase-tokens", tok, "") }()
			}
			// A request's rate limit has reached Redis: its reply is held (the
			// others wait for theirs, or for a new connection's check).
			var inFlight int
			waitfor.Until(t, waitfor.Patience, "a rate limit in Redis", func() error {
				keys, _ := rdb.Keys(context.Background(), "*"+prefix+":rl:pt:drain-pt-*").Result()
				if inFlight = len(keys); inFlight == 0 {
					return fmt.Errorf("none yet")
				}
				return nil
			})
			shutdownReleasing(t, a, proxy)
			created := 0
			for range users {
				switch err := <-results; {
				case err == nil:
					created++
				case strings.Contains(err.Error(), "status"):
					t.Errorf("a purchase token in flight at shutdown: %v", err)
				}
				// else a connection the closing server refused or reset
				// before it read the request
			}
			if created < inFlight {
				t.Errorf("%d purchase tokens answered 201, %d requests were in Redis when Shutdown began", created, inFlight)
			}
		})
	}
}
