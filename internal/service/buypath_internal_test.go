package service

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// buyPath takes a request for the buy only where the mux would hand that
// very request to the buy's pattern, with the same sale, and no redirect.
func FuzzBuyPathAgreesWithTheMux(f *testing.F) {
	for _, p := range []string{
		"/v1/sales/s1/orders", "/v1/sales/a.b:c-d_e/orders", "/v1/sales//orders", "/v1/sales/./orders",
		"/v1/sales/../orders", "/v1/sales/a/b/orders", "/v1/sales/a%2Fb/orders", "/v1/sales/a%20b/orders",
		"/v1/sales/a b/orders", "/v1/sales/s1/orders/", "//v1/sales/s1/orders", "/v1/sales/s1/./orders",
		"/v1/sales/orders", "/v1/sales/s1/orderz", "/v1/sales/%2e%2e/orders", "/v1/sales/s1%/orders", "/v1/sales/s1?x=1",
	} {
		f.Add("POST", p)
	}
	f.Add("GET", "/v1/sales/s1/orders")
	f.Fuzz(func(t *testing.T, method, target string) {
		if target == "" || target[0] != '/' {
			return
		}
		r, err := http.NewRequest(method, "http://h"+target, nil)
		if err != nil {
			return
		}
		sale, fast := buyPath(r)
		if !fast {
			return
		}
		var routed, got string
		mux := http.NewServeMux()
		mux.HandleFunc("/v1/sales/{sale}/orders", func(_ http.ResponseWriter, r *http.Request) {
			routed, got = "buy", r.PathValue("sale")
		})
		mux.HandleFunc("/", func(http.ResponseWriter, *http.Request) { routed = "other" })
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if routed != "buy" || got != sale || w.Code != http.StatusOK || method != http.MethodPost {
			t.Fatalf("%s %q: buyPath gives sale %q, the mux routes to %q (sale %q, status %d)", method, target, sale, routed, got, w.Code)
		}
	})
}

// The buy's ordinary paths do take the fast route.
func TestBuyPathTakesTheBuy(t *testing.T) {
	for _, p := range []string{"/v1/sales/s1/orders", "/v1/sales/flash-2026.11:A_1/orders"} {
		r := httptest.NewRequest("POST", p, nil)
		if sale, ok := buyPath(r); !ok || "/v1/sales/"+sale+"/orders" != p {
			t.Fatalf("%s: %q %v", p, sale, ok)
		}
	}
}
