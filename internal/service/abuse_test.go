package service_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/service"
)

// realStack is the production pair, for tests that need only one stack.
func realStack(t *testing.T) service.Config { return stacks[0].start(t) }

func buyBody(sku string) map[string]any {
	return map[string]any{"items": []map[string]any{{"sku": sku, "qty": 1}}}
}

// One buyer hammering a sale is throttled to the default per-user limit
// (5/s, burst 10) with 429 rate_limited and a Retry-After, while every
// other buyer still buys; throttled requests change nothing.
func TestOneUserHammeringIsThrottledOthersStillBuy(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		a.createSale("s1", 1000, "A", 10000)
		mallory := a.token("mallory")
		var (
			wg                  sync.WaitGroup
			mu                  sync.Mutex
			ok, limited, others int
		)
		began := time.Now()
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 15; i++ {
					r := a.call("POST", "/v1/sales/s1/orders", mallory, buyBody("A"))
					mu.Lock()
					switch r.status {
					case http.StatusCreated:
						ok++
					case http.StatusTooManyRequests:
						limited++
						if r.code(t) != "rate_limited" || r.header.Get("Retry-After") != "1" {
							t.Errorf("429 with code %q, Retry-After %q, want rate_limited and 1", r.code(t), r.header.Get("Retry-After"))
						}
					default:
						t.Errorf("mallory's buy: %d %s", r.status, r.body)
					}
					mu.Unlock()
				}
			}()
		}
		for i := 0; i < 20; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := a.call("POST", "/v1/sales/s1/orders", a.token(fmt.Sprintf("buyer%d", i)), buyBody("A"))
				mu.Lock()
				defer mu.Unlock()
				if r.status != http.StatusCreated {
					t.Errorf("an honest buyer got %d %s", r.status, r.body)
				}
				others++
			}()
		}
		wg.Wait()
		elapsed := time.Since(began)
		// The bucket holds 11 and refills 5 a second.
		most := 11 + int(elapsed.Seconds()*5) + 1
		if ok < 11 || ok > most || ok+limited != 60 {
			t.Fatalf("mallory: %d bought, %d throttled in %v; want 11..%d bought of 60", ok, limited, elapsed, most)
		}
		a.settle("s1")
		rep := a.admin("GET", "/v1/admin/sales/s1/reconcile", nil).json(t)
		sold := rep["items"].([]any)[0].(map[string]any)["sold"].(float64)
		if int(sold) != ok+others {
			t.Fatalf("sold %v, want %d: a throttled buy changed the stock", sold, ok+others)
		}
	})
}

// A sale's own limits replace the service's: a tighter per-user limit with
// a Retry-After of its own, "off", and a per-sale limit over every buyer.
func TestSaleRateLimits(t *testing.T) {
	a := startApp(t, realStack(t))
	create := func(id string, limits map[string]any) reply {
		return a.admin("POST", "/v1/admin/sales", map[string]any{"id": id, "per_user_limit": 100,
			"items": []map[string]any{{"sku": "A", "stock": 1000}}, "rate_limits": limits})
	}
	r := create("slow", map[string]any{"per_user": "1/m"})
	mustStatus(t, r, http.StatusCreated)
	if got := r.json(t)["rate_limits"]; fmt.Sprint(got) != "map[per_user:1/m]" {
		t.Fatalf("rate_limits in the sale = %v", got)
	}
	alice := a.token("alice")
	mustStatus(t, a.call("POST", "/v1/sales/slow/orders", alice, buyBody("A")), http.StatusCreated)
	r = a.call("POST", "/v1/sales/slow/orders", alice, buyBody("A"))
	mustStatus(t, r, http.StatusTooManyRequests)
	if ra, _ := strconv.Atoi(r.header.Get("Retry-After")); ra < 59 || ra > 60 {
		t.Fatalf("Retry-After %q after one buy under 1/m, want 59 or 60", r.header.Get("Retry-After"))
	}

	mustStatus(t, create("free", map[string]any{"per_user": "off"}), http.StatusCreated)
	for i := 0; i < 25; i++ { // beyond the default burst of 10
		mustStatus(t, a.call("POST", "/v1/sales/free/orders", alice, buyBody("A")), http.StatusCreated)
	}

	mustStatus(t, create("crowd", map[string]any{"per_sale": "3/m,alg=fixed-window"}), http.StatusCreated)
	// Not at a window's end, or the window may turn over mid-test.
	if s := time.Now().Second(); s > 55 {
		time.Sleep(time.Duration(61-s) * time.Second)
	}
	for i := 0; i < 3; i++ {
		mustStatus(t, a.call("POST", "/v1/sales/crowd/orders", a.token(fmt.Sprint("c", i)), buyBody("A")), http.StatusCreated)
	}
	r = a.call("POST", "/v1/sales/crowd/orders", a.token("c9"), buyBody("A"))
	if r.status != http.StatusTooManyRequests || !strings.Contains(r.json(t)["error"].(map[string]any)["message"].(string), "sale limit") {
		t.Fatalf("fourth buyer of a 3/m sale: %d %s", r.status, r.body)
	}

	for _, bad := range []map[string]any{{"per_user": "fast"}, {"per_ip": "0/s"}, {"per_sale": "5/s,burst=-1"}, {"per_user": 5}, {"every": "1/s"}} {
		if r := create("bad", bad); r.status != http.StatusBadRequest {
			t.Fatalf("rate_limits %v: %d %s, want 400", bad, r.status, r.body)
		}
	}
	mustStatus(t, a.call("GET", "/v1/sales/bad", "", nil), http.StatusNotFound)
}

// Per-address limits use X-Forwarded-For only from trusted proxies.
func TestPerIPLimitAndTrustedProxies(t *testing.T) {
	cfg := realStack(t)
	cfg.RateLimitIP, cfg.TrustedProxies = "2/m", []string{"127.0.0.0/8"}
	a := startApp(t, cfg)
	a.createSale("s1", 100, "A", 1000)
	buyFrom := func(user, xff string) int {
		return a.call("POST", "/v1/sales/s1/orders", a.token(user), buyBody("A"), "X-Forwarded-For", xff).status
	}
	// Two buyers behind one address share it; a third is refused.
	for _, u := range []string{"u1", "u2"} {
		if s := buyFrom(u, "203.0.113.7"); s != http.StatusCreated {
			t.Fatalf("%s: %d", u, s)
		}
	}
	if s := buyFrom("u3", "198.51.100.1, 203.0.113.7"); s != http.StatusTooManyRequests {
		t.Fatalf("third buy from 203.0.113.7 (with a spoofed hop before it): %d, want 429", s)
	}
	if s := buyFrom("u4", "203.0.113.8"); s != http.StatusCreated {
		t.Fatalf("another address: %d", s)
	}

	// Without trusting the proxy the header is ignored: every request is
	// from 127.0.0.1, whatever it claims.
	cfg = realStack(t)
	cfg.RateLimitIP = "2/m"
	b := startApp(t, cfg)
	b.createSale("s1", 100, "A", 1000)
	for i, want := range []int{http.StatusCreated, http.StatusCreated, http.StatusTooManyRequests} {
		r := b.call("POST", "/v1/sales/s1/orders", b.token(fmt.Sprint("v", i)), buyBody("A"), "X-Forwarded-For", fmt.Sprintf("192.0.2.%d", i))
		if r.status != want {
			t.Fatalf("buy %d claiming its own address: %d, want %d", i, r.status, want)
		}
	}
}

// The per-address limit counts an IPv6 client by its /64 (a host is given
// a /64 and may send from any address in it), an IPv4 client by its
// address, as the live streams' caps do. Before, every IPv6 address had a
// limit of its own.
func TestPerIPLimitGroupsIPv6ByItsSlash64(t *testing.T) {
	cfg := realStack(t)
	cfg.RateLimitIP, cfg.TrustedProxies = "1/m", []string{"127.0.0.0/8"}
	a := startApp(t, cfg)
	a.createSale("s1", 100, "A", 1000)
	for i, c := range []struct {
		from string
		want int
	}{
		{"2001:db8:1:2::1", http.StatusCreated},
		{"2001:db8:1:2:ffff:ffff:ffff:7", http.StatusTooManyRequests}, // the same /64
		{"2001:db8:1:3::1", http.StatusCreated},                       // the next /64
		{"203.0.113.7", http.StatusCreated},
		{"203.0.113.8", http.StatusCreated},                // IPv4: each address its own
		{"::ffff:203.0.113.7", http.StatusTooManyRequests}, // 203.0.113.7, mapped
	} {
		r := a.call("POST", "/v1/sales/s1/orders", a.token(fmt.Sprint("u", i)), buyBody("A"), "X-Forwarded-For", c.from)
		if r.status != c.want {
			t.Errorf("buy %d from %s: %d %s, want %d", i, c.from, r.status, r.body, c.want)
		}
	}
}

func TestBadRateLimitConfigRefusesToStart(t *testing.T) {
	for _, cfg := range []service.Config{
		{RateLimitUser: "lots"}, {RateLimitIP: "5/fortnight"}, {RateLimitSale: "0/s"}, {TrustedProxies: []string{"10.0.0.0/99"}},
	} {
		cfg.Addr, cfg.DatabaseURL = "127.0.0.1:0", "sqlite://"+t.TempDir()+"/db"
		if svc, err := service.Start(context.Background(), cfg); err == nil {
			_ = svc.Shutdown(context.Background())
			t.Fatalf("Start(%+v) succeeded", cfg)
		} else if strings.Contains(err.Error(), "\n") {
			t.Fatalf("error of more than one line: %q", err)
		}
	}
}

// Purchase tokens: one token, many concurrent buys: exactly one succeeds.
// Asking for tokens is limited per user, apart from buys, and passes the
// challenge hook first.
func TestPurchaseTokensUnderConcurrencyLimitsAndChallenge(t *testing.T) {
	cfg := realStack(t)
	cfg.Challenge = func(_ context.Context, r *http.Request, user, sale string) error {
		if user == "bot" || r.Header.Get("X-Captcha") != "solved" {
			return errors.New("captcha not solved")
		}
		return nil
	}
	a := startApp(t, cfg)
	mustStatus(t, a.admin("POST", "/v1/admin/sales", map[string]any{"id": "s1", "per_user_limit": 100, "require_purchase_token": true,
		"rate_limits": map[string]any{"per_user": "3/m"}, "items": []map[string]any{{"sku": "A", "stock": 100}}}), http.StatusCreated)
	alice := a.token("alice")
	issue := func(tok string, captcha string) reply {
		return a.call("POST", "/v1/sales/s1/purchase-tokens", tok, nil, "X-Captcha", captcha)
	}
	if r := issue(a.token("bot"), "solved"); r.status != http.StatusForbidden || r.code(t) != "permission_denied" {
		t.Fatalf("a bot's token request: %d %s", r.status, r.body)
	}
	if r := issue(alice, ""); r.status != http.StatusForbidden {
		t.Fatalf("token request without the captcha: %d %s", r.status, r.body)
	}
	r := issue(alice, "solved")
	mustStatus(t, r, http.StatusCreated)
	ptok := r.json(t)["token"].(string)

	var wg sync.WaitGroup
	statuses := make([]int, 16)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = a.call("POST", "/v1/sales/s1/orders", alice, buyBody("A"), "X-Purchase-Token", ptok).status
		}()
	}
	wg.Wait()
	count := map[int]int{}
	for _, s := range statuses {
		count[s]++
	}
	// 3/m per user: of 16 buys, 3 pass the limit, one of those uses the token.
	if count[http.StatusCreated] != 1 || count[http.StatusForbidden] != 2 || count[http.StatusTooManyRequests] != 13 {
		t.Fatalf("16 concurrent buys with one token: %v, want one 201, two 403, thirteen 429", count)
	}
	// Token requests have their own budget of 3/m, apart from buys. Alice
	// has used two: the limit comes before the challenge, so her request
	// without the captcha counted.
	mustStatus(t, issue(alice, "solved"), http.StatusCreated)
	mustStatus(t, issue(alice, "solved"), http.StatusTooManyRequests)
}

// Every answer carries security headers and a request id (the client's, if
// plausible); error bodies say nothing of the internals.
func TestSecurityHeadersAndRequestIDs(t *testing.T) {
	a := startApp(t, realStack(t))
	for _, path := range []string{"/v1/sales/none", "/healthz", "/v1/nope"} {
		r := a.call("GET", path, "", nil)
		for h, want := range map[string]string{"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
			"Referrer-Policy": "no-referrer", "Cache-Control": "no-store"} {
			if got := r.header.Get(h); got != want {
				t.Errorf("%s: %s = %q, want %q", path, h, got, want)
			}
		}
		if !strings.Contains(r.header.Get("Content-Security-Policy"), "default-src 'none'") {
			t.Errorf("%s: Content-Security-Policy %q", path, r.header.Get("Content-Security-Policy"))
		}
		if len(r.header.Get("X-Request-Id")) < 16 {
			t.Errorf("%s: X-Request-Id %q", path, r.header.Get("X-Request-Id"))
		}
	}
	if id := a.call("GET", "/healthz", "", nil, "X-Request-Id", "trace-42").header.Get("X-Request-Id"); id != "trace-42" {
		t.Errorf("a plausible client request id came back as %q", id)
	}
	if id := a.call("GET", "/healthz", "", nil, "X-Request-Id", "x\" injected=1").header.Get("X-Request-Id"); strings.Contains(id, "injected") {
		t.Errorf("an implausible client request id came back: %q", id)
	}
	if csp := a.call("GET", "/", "", nil).header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
		t.Errorf("dashboard CSP %q", csp)
	}
	// Too large a header: 431, before any handler.
	req, _ := http.NewRequest("GET", a.svc.URL()+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("b", 64<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("64 KiB header: %d, want 431", resp.StatusCode)
	}
}

// A client that never finishes its headers is cut off (slowloris).
func TestSlowClientIsCutOff(t *testing.T) {
	t.Parallel()
	a := startApp(t, service.Config{DatabaseURL: "sqlite://" + t.TempDir() + "/db"})
	conn, err := net.Dial("tcp", strings.TrimPrefix(a.svc.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	began := time.Now()
	fmt.Fprint(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err = bufio.NewReader(conn).ReadString('\n')
	if err == nil || time.Since(began) > 20*time.Second {
		t.Fatalf("connection with unfinished headers: read %v after %v, want it closed by the server", err, time.Since(began))
	}
}

// Secrets are shown once at start when generated, and never again: not the
// admin token, the JWT secret, a buyer's JWT or a purchase token, whatever
// the requests (bad tokens included), even at debug level.
func TestSecretsNeverLoggedAfterStart(t *testing.T) {
	var buf syncBuffer
	cfg := realStack(t)
	cfg.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.Addr, cfg.ReconcileEvery = "127.0.0.1:0", -1
	svc, err := service.Start(context.Background(), cfg) // secrets generated
	if err != nil {
		t.Fatal(err)
	}
	a := &app{t: t, svc: svc, ctx: context.Background()}
	defer svc.Shutdown(context.Background())
	startLog := buf.String()
	for _, secret := range []string{svc.AdminToken(), svc.JWTSecret()} {
		if strings.Count(startLog, secret) != 1 {
			t.Fatalf("a generated secret is not shown exactly once at start:\n%s", startLog)
		}
	}
	mustStatus(t, a.admin("POST", "/v1/admin/sales", map[string]any{"id": "s1", "require_purchase_token": true,
		"items": []map[string]any{{"sku": "A", "stock": 5}}}), http.StatusCreated)
	alice := a.token("alice")
	ptok := a.call("POST", "/v1/sales/s1/purchase-tokens", alice, nil).json(t)["token"].(string)
	mustStatus(t, a.call("POST", "/v1/sales/s1/orders", alice, buyBody("A"), "X-Purchase-Token", ptok), http.StatusCreated)
	a.call("POST", "/v1/sales/s1/orders", alice, buyBody("A"), "X-Purchase-Token", ptok)
	a.call("POST", "/v1/admin/sales", alice, map[string]any{})
	a.call("POST", "/v1/admin/sales", svc.AdminToken()+"x", map[string]any{})
	a.call("GET", "/v1/orders/s1.nope", svc.AdminToken(), nil)
	mustStatus(t, a.admin("POST", "/v1/admin/sales/s1/pause", nil), http.StatusOK)
	after := strings.TrimPrefix(buf.String(), startLog)
	if !strings.Contains(after, "request_id=") {
		t.Fatalf("no request lines logged at debug level:\n%s", after)
	}
	for name, secret := range map[string]string{"admin token": svc.AdminToken(), "JWT secret": svc.JWTSecret(),
		"buyer JWT": alice, "purchase token": ptok} {
		if strings.Contains(after, secret) {
			t.Fatalf("the %s was logged after start:\n%s", name, after)
		}
	}
}

// Operators' actions are audited in the database, with the request id the
// client saw; refused ones are not.
func TestAdminActionsAudited(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		a.createSale("s1", 5, "A", 10)
		a.call("POST", "/v1/admin/sales/s1/pause", a.token("alice"), nil) // refused: 403
		r := a.admin("POST", "/v1/admin/sales/s1/items/A/restock", map[string]any{"qty": 3})
		mustStatus(t, r, http.StatusOK)
		reqID := r.header.Get("X-Request-Id")
		mustStatus(t, a.admin("POST", "/v1/admin/sales/s1/pause", nil), http.StatusOK)
		mustStatus(t, a.admin("POST", "/v1/admin/sales/s1/resume", nil), http.StatusOK)
		order := a.call("POST", "/v1/sales/s1/orders", a.token("bob"), buyBody("A")).json(t)["order_id"].(string)
		mustStatus(t, a.admin("POST", "/v1/orders/"+order+"/cancel", nil), http.StatusOK)
		log, err := a.svc.Store().AuditLog(a.ctx, "s1")
		if err != nil {
			t.Fatal(err)
		}
		var actions []string
		for _, e := range log {
			actions = append(actions, e.Action)
		}
		if got := strings.Join(actions, ","); got != "sale created,restocked,paused,resumed,order cancelled" {
			t.Fatalf("audited actions %q", got)
		}
		if e := log[1]; e.Target != "A" || e.Detail["qty"] != float64(3) || e.RequestID != reqID || !strings.HasPrefix(e.Remote, "127.0.0.1:") {
			t.Fatalf("restock audit entry %+v, want target A, qty 3, request id %s", e, reqID)
		}
		if e := log[4]; e.Target != order || e.Detail["user"] != "bob" {
			t.Fatalf("cancel audit entry %+v", e)
		}
	})
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
