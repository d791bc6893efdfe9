package service_test

// Adversarial tests of the buy's shortcut past the ServeMux (issue 15):
// whatever request the shortcut takes must get the answer the mux gives,
// byte for byte, and the ones it leaves to the mux (other methods, unclean
// or escaped paths) the mux's answers as before.

import (
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// escapeFirst writes a path segment's first byte as %XX: the mux hands the
// buy the same sale, but the shortcut does not take the path (it has a
// RawPath), so the answer is the mux's.
func escapeFirst(seg string) string { return fmt.Sprintf("%%%02X", seg[0]) + seg[1:] }

// waitDigits are the seconds of a throttled buy's wait.
var waitDigits = regexp.MustCompile(`(Retry-After: \["|retry in )[0-9]+`)

// dumpReply is a reply as the client sees it, Date aside: status, every
// header and the body.
func dumpReply(r reply) string {
	var keys []string
	for k := range r.header {
		if k != "Date" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d\n", r.status)
	for _, k := range keys {
		fmt.Fprintf(&sb, "%s: %q\n", k, r.header[k])
	}
	sb.Write(r.body)
	return sb.String()
}

// TestBuyShortcutAnswersAsTheMux: each buy the shortcut takes
// ("/v1/sales/{sale}/orders", POST, clean and unescaped) is sent again with
// its sale's first byte escaped, which the mux alone routes, to the same
// handler, with the same sale: the two answers must be the same byte for
// byte (Date aside): every refused buy of the golden's list, a sale with
// characters the path leaves unescaped (";", ":", "@", "=") or a very long
// one, a body over the limit (with and without a Content-Length), a
// replayed buy (same key: 200 and the first order), the limit, a sold-out
// sku, the throttle, no token. Fresh buys by two new buyers must agree but
// for the order itself. Other methods on the buy's path get 405 with
// "Allow: POST" and the JSON error, as before; paths the mux cleans or does
// not know stay its answers (a redirect, a 404).
func TestBuyShortcutAnswersAsTheMux(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		mustStatus(t, a.admin("POST", "/v1/admin/sales", map[string]any{"id": "s1", "per_user_limit": 2,
			"items": []map[string]any{{"sku": "A", "stock": 100}, {"sku": "B", "stock": 1}}}), http.StatusCreated)
		mustStatus(t, a.admin("POST", "/v1/admin/sales", map[string]any{"id": "r1", "per_user_limit": 50,
			"rate_limits": map[string]any{"per_user": "1/m"}, "items": []map[string]any{{"sku": "A", "stock": 100}}}), http.StatusCreated)
		one := map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}}
		mustStatus(t, a.call("POST", "/v1/sales/s1/orders", a.token("u1"), one, "Idempotency-Key", "k1"), http.StatusCreated)
		mustStatus(t, a.call("POST", "/v1/sales/s1/orders", a.token("bx"), map[string]any{"items": []map[string]any{{"sku": "B", "qty": 1}}}), http.StatusCreated)
		mustStatus(t, a.call("POST", "/v1/sales/r1/orders", a.token("rt"), one), http.StatusCreated)
		a.settle("s1") // a replay's status is the database's: confirmed by now

		n := 0
		pair := func(name, sale, user string, body any, headers ...string) {
			t.Helper()
			n++
			id := fmt.Sprintf("adv-req-%d", n)
			tok := ""
			if user != "" {
				tok = a.token(user)
			}
			h := append([]string{"X-Request-Id", id}, headers...)
			fast := a.call("POST", "/v1/sales/"+sale+"/orders", tok, body, h...)
			muxed := a.call("POST", "/v1/sales/"+escapeFirst(sale)+"/orders", tok, body, h...)
			got, want := dumpReply(fast), dumpReply(muxed)
			if name == "throttled" { // the wait, in whole seconds, may tick between the two
				got, want = waitDigits.ReplaceAllString(got, "${1}N"), waitDigits.ReplaceAllString(want, "${1}N")
				if !strings.HasPrefix(got, "429") {
					t.Errorf("throttled: %s", got)
				}
			}
			if got != want {
				t.Errorf("%s: the shortcut's answer:\n%s\nthe mux's:\n%s", name, got, want)
			}
			if fast.header.Get("X-Request-Id") != id || fast.header.Get("Cache-Control") != "no-store" ||
				fast.header.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("%s: headers %v", name, fast.header)
			}
		}
		for _, b := range badBuys("s1", "u9") {
			if strings.Contains(b.sale, "%") {
				continue // escaped already: the mux's
			}
			pair(b.name, b.sale, b.user, b.body, b.headers...)
		}
		for i, sale := range []string{"a;b", "a:b", "a@b", "a=b", "a,b", "a+b", "a$b", "...", ".a", "a.", "-", strings.Repeat("s", 10000)} {
			// A buyer each: a sale that does not exist is looked up within
			// the buyer's budget of look-ups (saleFor), which one buyer's
			// many such pairs would spend.
			pair("sale "+sale[:min(len(sale), 8)], sale, fmt.Sprint("us", i), one)
		}
		big := `{"items":[{"sku":"A","qty":1}],"pad":"` + strings.Repeat("x", 70<<10) + `"}`
		pair("body over the limit", "s1", "u9", big)
		pair("replay", "s1", "u1", one, "Idempotency-Key", "k1")
		pair("replay with other lines", "s1", "u1", map[string]any{"items": []map[string]any{{"sku": "A", "qty": 2}}}, "Idempotency-Key", "k1")
		pair("past the limit", "s1", "u1", map[string]any{"items": []map[string]any{{"sku": "A", "qty": 2}}})
		pair("sold out", "s1", "u8", map[string]any{"items": []map[string]any{{"sku": "B", "qty": 1}}})
		pair("throttled", "r1", "rt", one)
		pair("unknown sku", "s1", "u9", map[string]any{"items": []map[string]any{{"sku": "Z", "qty": 1}}})

		// A body over the limit with no Content-Length (chunked).
		chunked := func(path string) reply { return a.postChunked(path, "u9", big, "X-Request-Id", "adv-chunked") }
		if got, want := dumpReply(chunked("/v1/sales/s1/orders")), dumpReply(chunked("/v1/sales/%731/orders")); got != want {
			t.Errorf("chunked body over the limit: the shortcut's answer:\n%s\nthe mux's:\n%s", got, want)
		} else if !strings.HasPrefix(got, "400") && !strings.HasPrefix(got, "413") {
			t.Errorf("chunked body over the limit: %s", got)
		}

		// Two new buyers: the same answer but for their order.
		fast := a.call("POST", "/v1/sales/s1/orders", a.token("n1"), one, "X-Request-Id", "adv-new")
		muxed := a.call("POST", "/v1/sales/%731/orders", a.token("n2"), one, "X-Request-Id", "adv-new")
		mustStatus(t, fast, http.StatusCreated)
		mustStatus(t, muxed, http.StatusCreated)
		norm := func(r reply, user string) string {
			t.Helper()
			m := r.json(t)
			r.header = r.header.Clone()
			r.header.Del("Content-Length") // a time's digits vary
			s := dumpReply(r)
			for _, k := range []string{"order_id", "created_at"} {
				v, _ := m[k].(string)
				s = strings.ReplaceAll(s, `"`+v+`"`, `"`+k+`"`)
			}
			s = strings.ReplaceAll(s, `"user_id":"`+user+`"`, `"user_id":"USER"`)
			items, _ := m["items"].([]any)
			if len(items) != 1 {
				t.Fatalf("items %v", m["items"])
			}
			rem, _ := items[0].(map[string]any)["remaining"].(float64)
			return strings.ReplaceAll(s, fmt.Sprintf(`"remaining":%d`, int64(rem)), `"remaining":R`)
		}
		if got, want := norm(fast, "n1"), norm(muxed, "n2"); got != want {
			t.Errorf("a new buy: the shortcut's answer:\n%s\nthe mux's:\n%s", got, want)
		}

		// Other methods on the buy's path: 405, Allow: POST, a JSON error
		// (no body for HEAD), whichever way the path is written.
		for _, m := range []string{"GET", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS", "post", "POSTX"} {
			var answers []string
			for _, p := range []string{"/v1/sales/s1/orders", "/v1/sales/%731/orders"} {
				r := a.call(m, p, a.token("u9"), one, "X-Request-Id", "adv-method")
				if r.status != http.StatusMethodNotAllowed || r.header.Get("Allow") != "POST" {
					t.Errorf("%s %s: %d Allow %q: %s", m, p, r.status, r.header.Get("Allow"), r.body)
				}
				if m != "HEAD" && r.code(t) != "invalid_argument" {
					t.Errorf("%s %s: %s", m, p, r.body)
				}
				answers = append(answers, dumpReply(r))
			}
			if answers[0] != answers[1] {
				t.Errorf("%s: %s\nagainst\n%s", m, answers[0], answers[1])
			}
		}

		// Paths the shortcut leaves alone get the mux's answers: unknown
		// ones a JSON 404 (or another endpoint's answer), unclean ones its
		// redirect: never a buy.
		noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		a.settle("s1")
		before := a.state("s1")
		for p, want := range map[string]int{
			"/v1/sales/s1/orders/":          http.StatusNotFound,
			"/v1/sales//orders":             http.StatusTemporaryRedirect,
			"/v1/sales/./orders":            http.StatusTemporaryRedirect,
			"/v1/sales/../orders":           http.StatusTemporaryRedirect,
			"/v1/sales/s1//orders":          http.StatusTemporaryRedirect,
			"/v1/sales/./s1/orders":         http.StatusTemporaryRedirect,
			"/v1/sales/x/../s1/orders":      http.StatusTemporaryRedirect,
			"/v1/sales/s1/orders/../orders": http.StatusTemporaryRedirect,
			"/v1/sales/s1%2Forders":         http.StatusMethodNotAllowed, // the sale "s1/orders": GET only
			"/v1/sales/s1%2F/orders":        http.StatusBadRequest,       // the sale "s1/"
			"/v1/sales/%2e%2e/orders":       http.StatusNotFound,
			"/v1/sales/orders":              http.StatusMethodNotAllowed, // the sale "orders": GET only
			"/v1/sales/s1/orderss":          http.StatusNotFound,
			"//v1/sales/s1/orders":          http.StatusTemporaryRedirect,
		} {
			req, err := http.NewRequest("POST", a.svc.URL()+p, strings.NewReader(`{"items":[{"sku":"A","qty":1}]}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+a.token("u9"))
			resp, err := noRedirect.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("POST %s: %d, want %d", p, resp.StatusCode, want)
			}
		}
		if after := a.state("s1"); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("paths that are no buy changed the sale: %v, was %v", after, before)
		}
	})
}
