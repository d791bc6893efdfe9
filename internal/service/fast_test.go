package service_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/faultnet"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/service"
	"github.com/seckill/seckill/internal/waitfor"
)

// startFastApp is startApp on fasthttp (what `seckill serve` runs), and
// the same service's http.Handler served by net/http: two doors to one
// service.
func startFastApp(t *testing.T, cfg service.Config) (a *app, netURL string) {
	t.Helper()
	cfg.HTTPServer = service.HTTPServerFast
	a = startApp(t, cfg)
	srv := httptest.NewServer(a.svc.Handler())
	t.Cleanup(srv.Close)
	return a, srv.URL
}

// namedHeaders are the reply headers the contract and the service name:
// compared between the two servers.
var namedHeaders = []string{"Content-Type", "Cache-Control", "Retry-After", "Allow",
	"X-Content-Type-Options", "X-Frame-Options", "Referrer-Policy", "Cross-Origin-Resource-Policy",
	"Content-Security-Policy", "X-Request-Id"}

// eqRequest is one request of the matrix; in its path, headers and body
// "{T}" is the server's tag (n or f), so that each server has its own
// sales and buyers in the same states.
type eqRequest struct {
	method, path string
	token        string // a user name (signed, {T} replaced), or "raw:<header value>"
	headers      []string
	body         string
}

// TestFastHTTPBuyMatchesNetHTTP sends a matrix of buys to the service's
// handler on net/http and to `serve`'s fasthttp (where the buy is served
// natively), each on sales and buyers of its own in the same state, and
// requires the same status, named headers and body, byte for byte, but
// for order ids, timestamps and the tag.
func TestFastHTTPBuyMatchesNetHTTP(t *testing.T) {
	cfg := realStack(t)
	cfg.DegradedTick, cfg.DegradedGrace = 100*time.Millisecond, 400*time.Millisecond
	a, netURL := startFastApp(t, cfg)
	servers := []struct{ tag, url string }{{"n", netURL}, {"f", a.svc.URL()}}
	for _, s := range servers {
		a.createSale("eq-"+s.tag+"-main", 1, "A", 1000, "B", 5)
		a.createSale("eq-"+s.tag+"-out", 5, "A", 1)
		mustStatus(t, a.admin("POST", "/v1/admin/sales", map[string]any{"id": "eq-" + s.tag + "-slow", "per_user_limit": 100,
			"items": []map[string]any{{"sku": "A", "stock": 1000}}, "rate_limits": map[string]any{"per_user": "1/h"}}), http.StatusCreated)
	}
	secret := a.svc.JWTSecret()
	sign := func(user string, claims jwt.MapClaims, key string) string {
		c := jwt.MapClaims{"sub": user}
		for k, v := range claims {
			c[k] = v
		}
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(key))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	buyA := `{"items":[{"sku":"A","qty":1}]}`
	big := `{"items":[{"sku":"A","qty":1}],"pad":"` + strings.Repeat("x", 64<<10) + `"}`
	huge := `{"items":[{"sku":"A","qty":1}],"pad":"` + strings.Repeat("x", 300<<10) + `"}`
	cases := []struct {
		name string
		reqs []eqRequest
	}{
		{"good buy", []eqRequest{{"POST", "/v1/sales/eq-{T}-main/orders", "u-{T}-good", nil, buyA}}},
		{"good buy, two lines, query", []eqRequest{{"POST", "/v1/sales/eq-{T}-main/orders?x=1", "u-{T}-two", nil, `{"items":[{"sku":"A","qty":1},{"sku":"B","qty":2}]}`}}},
		{"resend with the same key", []eqRequest{
			{"POST", "/v1/sales/eq-{T}-main/orders", "u-{T}-idem", []string{"Idempotency-Key", "k-{T}-1"}, buyA},
			{"POST", "/v1/sales/eq-{T}-main/orders", "u-{T}-idem", []string{"Idempotency-Key", "k-{T}-1"}, buyA},
			{"POST", "/v1/sales/eq-{T}-main/orders", "u-{T}-idem", []string{"Idempotency-Key", "k-{T}-1"}, `{"items":[{"sku":"B","qty":1}]}`}}},
		{"empty key", []eqRequest{{"POST", "/v1/sales/eq-{T}-main/orders", "u-{T}-k0", []string{"Idempotency-Key", ""}, buyA}}},
		{"long key", []eqRequest{{"POST", "/v1/sales/eq-{T}-main/orders", "u-{T}-k65", []string{"Idempotency-Key", strings.Repeat("k", 65)}, buyA}}},
		{"client's request id", []eqRequest{{"POST", "/v1/sales/eq-{T}-main/orders", "u-{T}-rid", []string{"X-Request-Id", "req-123"}, buyA}}},
		{"bad JSON", []eqRequest{{"POST", "/v1/sales/eq-{T}-main/orders", "u-{T}-bad", nil, `{"items":[`}}},
		{"unknown field", []eqRequest{{"POST", "/v1/sales/eq-{T}-main/orders", "u-{T}-bad", nil, `{"items":[{"sku":"A","qty":1}],"x":1}`}}},
		{"qty 0", []eqRequest{{"POST", "/v1/sales/eq-{T}-main/orders", "u-{T}-bad", nil, `{"items":[{"sku":"A","qty":0}]}`}}},
		{"empty body", []eqRequest{{"POST", "/v1/sales/eq-{T}-main/orders", "u-{T}-bad", nil, ``}}},
		{"no token", []eqRequest{{"POST", "/v1/sales/eq-{T}-main/orders", "", nil, buyA}}},
		{"not bearer", []eqRequest{{"POST", "/v1/sales/eq-{T}-main/orders", "raw:Basic dTpw", nil, buyA}}},
		{"expired token", []eqRequest{{"POST", "/v1/sales/eq-{T}-main/orders",
			"raw:Bearer " + sign("u-exp", jwt.MapClaims{"exp": time.Now().Add(-time.Minute).Unix()}, secret), nil, buyA}}},
		{"wrong signature", []eqRequest{{"POST", "/v1/sales/eq-{T}-main/orders",
			"raw:Bearer " + sign("u-sig", nil, "another-secret"), nil, buyA}}},
		{"wrong method", []eqRequest{{"GET", "/v1/sales/eq-{T}-main/orders", "u-{T}-get", nil, ""}}},
		{"escaped path", []eqRequest{{"POST", "/v1/sales/eq-{T}-m%61in/orders", "u-{T}-esc", nil, buyA}}},
		{"unknown sale", []eqRequest{{"POST", "/v1/sales/eq-{T}-nosuch/orders", "u-{T}-none", nil, buyA}}},
		{"unknown sku", []eqRequest{{"POST", "/v1/sales/eq-{T}-main/orders", "u-{T}-sku", nil, `{"items":[{"sku":"Z","qty":1}]}`}}},
		{"sold out", []eqRequest{
			{"POST", "/v1/sales/eq-{T}-out/orders", "u-{T}-out1", nil, buyA},
			{"POST", "/v1/sales/eq-{T}-out/orders", "u-{T}-out2", nil, buyA}}},
		{"per-user limit", []eqRequest{
			{"POST", "/v1/sales/eq-{T}-main/orders", "u-{T}-lim", nil, buyA},
			{"POST", "/v1/sales/eq-{T}-main/orders", "u-{T}-lim", nil, buyA}}},
		{"rate limited", []eqRequest{
			{"POST", "/v1/sales/eq-{T}-slow/orders", "u-{T}-rate", nil, buyA},
			{"POST", "/v1/sales/eq-{T}-slow/orders", "u-{T}-rate", nil, buyA}}},
		{"body over 64 KiB", []eqRequest{{"POST", "/v1/sales/eq-{T}-main/orders", "u-{T}-big", nil, big}}},
		{"body over 64 KiB, no token", []eqRequest{{"POST", "/v1/sales/eq-{T}-main/orders", "", nil, big}}},
		{"body of 300 KiB", []eqRequest{{"POST", "/v1/sales/eq-{T}-main/orders", "u-{T}-huge", nil, huge}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { compareServers(t, servers, secret, c.reqs) })
	}
	// Degraded mode: the database sells.
	mustStatus(t, a.admin("PUT", "/v1/admin/degraded", map[string]any{"setting": "force"}), http.StatusOK)
	a.waitMode("db")
	t.Run("degraded", func(t *testing.T) {
		compareServers(t, servers, secret, []eqRequest{
			{"POST", "/v1/sales/eq-{T}-main/orders", "u-{T}-db", []string{"Idempotency-Key", "k-{T}-db"}, buyA},
			{"POST", "/v1/sales/eq-{T}-main/orders", "u-{T}-db", []string{"Idempotency-Key", "k-{T}-db"}, buyA},
			{"POST", "/v1/sales/eq-{T}-main/orders", "u-{T}-db", nil, buyA}})
	})
}

var (
	volatileJSON  = regexp.MustCompile(`"(order_id|created_at|pay_by|joined_at)":"[^"]*"`)
	pollAfter     = regexp.MustCompile(`"poll_after_ms":[0-9]+`)
	settledStatus = regexp.MustCompile(`"status":"(pending|confirmed)"`)
	generatedID   = regexp.MustCompile(`^[0-9a-f]{24}$`)
)

// compareServers sends reqs in order to each server, and requires the
// same replies.
func compareServers(t *testing.T, servers []struct{ tag, url string }, secret string, reqs []eqRequest) {
	t.Helper()
	replies := make([][]reply, len(servers))
	for i, s := range servers {
		for _, r := range reqs {
			replies[i] = append(replies[i], sendTagged(t, s.url, s.tag, secret, r))
		}
	}
	for j := range reqs {
		want, got := replies[0][j], replies[1][j]
		if want.status != got.status {
			t.Errorf("request %d: status %d over net/http, %d over fasthttp: %s | %s", j, want.status, got.status, want.body, got.body)
		}
		for _, h := range namedHeaders {
			w, g := want.header.Values(h), got.header.Values(h)
			if h == "X-Request-Id" && len(w) == 1 && len(g) == 1 && generatedID.MatchString(w[0]) && generatedID.MatchString(g[0]) {
				continue // each generated its own
			}
			if strings.Join(w, "\n") != strings.Join(g, "\n") {
				t.Errorf("request %d: %s %q over net/http, %q over fasthttp", j, h, w, g)
			}
		}
		if len(want.header.Values("X-Request-Id")) != 1 {
			t.Errorf("request %d: X-Request-Id %q", j, want.header.Values("X-Request-Id"))
		}
		wb, gb := normalize(want.body, "n"), normalize(got.body, "f")
		if !bytes.Equal(wb, gb) {
			t.Errorf("request %d: bodies differ:\nnet/http %s\nfasthttp %s", j, wb, gb)
		}
	}
}

func normalize(body []byte, tag string) []byte {
	b := volatileJSON.ReplaceAll(body, []byte(`"$1":"-"`))
	b = pollAfter.ReplaceAll(b, []byte(`"poll_after_ms":0`)) // spread at random
	// A replay is answered from the database once the consumer has stored
	// the order (confirmed), from Redis before (pending): either, as the
	// consumer's timing falls, on either server.
	b = settledStatus.ReplaceAll(b, []byte(`"status":"pending|confirmed"`))
	b = bytes.ReplaceAll(b, []byte("-"+tag+"-"), []byte("-T-"))
	return b
}

func sendTagged(t *testing.T, base, tag, secret string, r eqRequest) reply {
	t.Helper()
	tagged := func(s string) string { return strings.ReplaceAll(s, "{T}", tag) }
	req, err := http.NewRequest(r.method, base+tagged(r.path), strings.NewReader(tagged(r.body)))
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case strings.HasPrefix(r.token, "raw:"):
		req.Header.Set("Authorization", strings.TrimPrefix(r.token, "raw:"))
	case r.token != "":
		tok, err := service.SignUser(secret, tagged(r.token), jwt.MapClaims{"exp": time.Now().Add(time.Hour).Unix()})
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for i := 0; i+1 < len(r.headers); i += 2 {
		req.Header.Set(r.headers[i], tagged(r.headers[i+1]))
	}
	if strings.Contains(r.path, "%") {
		req.URL.RawPath = tagged(r.path)
		if i := strings.IndexByte(req.URL.RawPath, '?'); i >= 0 {
			req.URL.RawPath = req.URL.RawPath[:i]
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s%s: %v", r.method, base, r.path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: raw}
}

// TestFastHTTPQueueMatchesNetHTTP: a waiting room's joins and place
// reads, served natively on fasthttp (queueIn), answer as over net/http:
// the same status, named headers and body, byte for byte, but for times
// and the tag.
func TestFastHTTPQueueMatchesNetHTTP(t *testing.T) {
	a, netURL := startFastApp(t, realStack(t))
	servers := []struct{ tag, url string }{{"n", netURL}, {"f", a.svc.URL()}}
	drawUntil := time.Now().Add(time.Second)
	later := time.Now().Add(time.Hour)
	for _, s := range servers {
		mustStatus(t, a.roomSale("eq-"+s.tag+"-draw", 10, map[string]any{}, map[string]any{"starts_at": rfc(later)}), http.StatusCreated)
		mustStatus(t, a.roomSale("eq-"+s.tag+"-line", 10, map[string]any{"draw_until": rfc(drawUntil)},
			map[string]any{"starts_at": rfc(later)}), http.StatusCreated)
		mustStatus(t, a.roomSale("eq-"+s.tag+"-full", 10, map[string]any{"max_waiting": 1}, map[string]any{"starts_at": rfc(later)}), http.StatusCreated)
		mustStatus(t, a.roomSale("eq-"+s.tag+"-later", 10, map[string]any{"opens_at": rfc(later)}, nil), http.StatusCreated)
		a.createSale("eq-"+s.tag+"-plain", 1, "A", 10)
	}
	time.Sleep(time.Until(drawUntil) + 50*time.Millisecond) // the line's draw is sealed: joins are arrivals
	cases := []struct {
		name string
		reqs []eqRequest
	}{
		{"join before the draw, again, read", []eqRequest{
			{"POST", "/v1/sales/eq-{T}-draw/queue", "u-{T}-d1", nil, ""},
			{"POST", "/v1/sales/eq-{T}-draw/queue", "u-{T}-d1", []string{"X-Request-Id", "req-q1"}, ""},
			{"GET", "/v1/sales/eq-{T}-draw/queue", "u-{T}-d1", nil, ""}}},
		{"arrivals in line", []eqRequest{
			{"POST", "/v1/sales/eq-{T}-line/queue", "u-{T}-l1", nil, ""},
			{"POST", "/v1/sales/eq-{T}-line/queue?x=1", "u-{T}-l2", nil, ""},
			{"GET", "/v1/sales/eq-{T}-line/queue", "u-{T}-l2", nil, ""},
			{"GET", "/v1/sales/eq-{T}-line/queue", "u-{T}-l1", nil, "ignored"}}},
		{"never joined", []eqRequest{{"GET", "/v1/sales/eq-{T}-line/queue", "u-{T}-none", nil, ""}}},
		{"no token", []eqRequest{{"POST", "/v1/sales/eq-{T}-line/queue", "", nil, ""}}},
		{"not bearer", []eqRequest{{"GET", "/v1/sales/eq-{T}-line/queue", "raw:Basic dTpw", nil, ""}}},
		{"full", []eqRequest{
			{"POST", "/v1/sales/eq-{T}-full/queue", "u-{T}-f1", nil, ""},
			{"POST", "/v1/sales/eq-{T}-full/queue", "u-{T}-f2", nil, ""}}},
		{"not open", []eqRequest{{"POST", "/v1/sales/eq-{T}-later/queue", "u-{T}-o1", nil, ""}}},
		{"no room", []eqRequest{
			{"POST", "/v1/sales/eq-{T}-plain/queue", "u-{T}-p1", nil, ""},
			{"GET", "/v1/sales/eq-{T}-plain/queue", "u-{T}-p1", nil, ""}}},
		{"unknown sale", []eqRequest{{"GET", "/v1/sales/eq-{T}-nosuch/queue", "u-{T}-n1", nil, ""}}},
		{"bad sale id", []eqRequest{{"POST", "/v1/sales/eq-{T}-a!b/queue", "u-{T}-n1", nil, ""}}},
		{"escaped path", []eqRequest{{"POST", "/v1/sales/eq-{T}-l%69ne/queue", "u-{T}-esc", nil, ""}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { compareServers(t, servers, a.svc.JWTSecret(), c.reqs) })
	}
}

// TestFastHTTPLiveStreamSendsBeforeItEnds: the dashboard's event stream,
// through fasthttpadaptor, delivers an event while the stream is open (a
// buffering adaptor would hold it until the handler returns, which a
// stream never does before shutdown).
func TestFastHTTPLiveStreamSendsBeforeItEnds(t *testing.T) {
	cfg := realStack(t)
	cfg.SampleEvery = 50 * time.Millisecond
	a, _ := startFastApp(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Patience)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", a.svc.URL()+"/v1/live", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: {") {
			return // an event, and the stream still open
		}
	}
	t.Fatalf("the stream ended (%v) before an event", sc.Err())
}

// TestFastHTTPShutdownDrainsBuys: buys in flight when Shutdown begins
// (run in Redis, their replies held back by a proxy) are answered 201
// before Shutdown returns, on either server.
func TestFastHTTPShutdownDrainsBuys(t *testing.T) {
	for _, server := range []string{service.HTTPServerNet, service.HTTPServerFast} {
		t.Run(server, func(t *testing.T) { testShutdownDrainsBuys(t, server) })
	}
}

func testShutdownDrainsBuys(t *testing.T, server string) {
	rdb := redistest.Standalone(t)
	proxy := faultnet.Start(t, rdb.Options().Addr)
	// NodeRecheck: the start-up node check holds through the test (a check
	// is a round trip the proxy would hold too).
	cfg := service.Config{RedisURL: "redis://" + proxy.Addr() + "/0", KeyPrefix: redistest.Prefix(t, rdb),
		DatabaseURL: dbtest.PostgresURL(t), RateLimitUser: "off", HTTPServer: server, NodeRecheck: time.Hour}
	a := startApp(t, cfg)
	a.createSale("drain", 1, "A", 100000)
	const buyers = 16
	tokens := make([]string, buyers)
	for i := range tokens {
		tokens[i] = a.token(fmt.Sprint("drain-", i))
	}
	proxy.HoldReplies(true)
	results := make(chan error, buyers)
	for _, tok := range tokens {
		go func() {
			results <- postCreated(a.svc.URL()+"/v1/sales/drain/orders", tok, `{"items":[{"sku":"A","qty":1}]}`)
		}()
	}
	// Wait until Redis has run some of the buys: their handlers wait for
	// the held replies.
	orders := a.svc.Engine().Key("drain", "orders")
	var inFlight int64
	waitfor.Until(t, waitfor.Patience, "buys reached Redis", func() error {
		recs, _ := redisOrders(context.Background(), rdb, orders)
		inFlight = int64(len(recs))
		if inFlight == 0 {
			return fmt.Errorf("no order in Redis yet")
		}
		return nil
	})
	shutdownReleasing(t, a, proxy)
	created := 0
	for range buyers {
		err := <-results
		switch {
		case err == nil:
			created++
		case strings.Contains(err.Error(), "status"):
			t.Errorf("a buy: %v", err)
		}
		// else a connection the closing server reset before reading
		// its request (net/http's and fasthttp's alike)
	}
	t.Logf("%d buys in Redis when Shutdown began, %d answered 201", inFlight, created)
	if int64(created) < inFlight {
		t.Fatalf("%d buys answered 201, %d were in flight when Shutdown began", created, inFlight)
	}
}

// postCreated POSTs body with the bearer token from a goroutine of its own
// (it may not fail the test: a test goroutine waiting for its result would
// wait for ever): nil for 201, an error saying "status" for another status,
// or the client's error (a connection the closing server refused or reset
// before it read the request).
func postCreated(url, token, body string) error {
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("status %d: %s", resp.StatusCode, raw)
	}
	return nil
}

// shutdownReleasing shuts a's service down while proxy holds Redis's
// replies, and lets them go once Shutdown has begun.
func shutdownReleasing(t *testing.T, a *app, proxy *faultnet.Proxy) {
	t.Helper()
	go func() {
		time.Sleep(200 * time.Millisecond) // let Shutdown begin (if it has not, the test is only weaker)
		proxy.HoldReplies(false)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.svc.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}
