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

// queuePathOf takes a request for a buyer's place only where the mux
// would hand that very request to the place's pattern, with the same sale
// and method, and no redirect.
func FuzzQueuePathAgreesWithTheMux(f *testing.F) {
	for _, p := range []string{
		"/v1/sales/s1/queue", "/v1/sales/a.b:c-d_e/queue", "/v1/sales//queue", "/v1/sales/./queue",
		"/v1/sales/../queue", "/v1/sales/a/b/queue", "/v1/sales/a b/queue", "/v1/sales/s1/queue/",
		"//v1/sales/s1/queue", "/v1/sales/s1/./queue", "/v1/sales/queue", "/v1/sales/s1/queue/draw",
		"/v1/sales/s1/queuez", "/v1/sales/s1/queue?x=1", "/v1/admin/sales/s1/queue", "/v1/sales/queue/queue",
	} {
		f.Add("POST", p)
		f.Add("GET", p)
	}
	f.Add("HEAD", "/v1/sales/s1/queue")
	f.Add("PUT", "/v1/sales/s1/queue")
	f.Fuzz(func(t *testing.T, method, target string) {
		if target == "" || target[0] != '/' {
			return
		}
		r, err := http.NewRequest(method, "http://h"+target, nil)
		if err != nil || r.URL.RawPath != "" {
			return // escaped: never the fast route (fastRoute)
		}
		sale, join, fast := queuePathOf(r.Method, r.URL.Path)
		if !fast {
			return
		}
		var routed, got string
		mux := http.NewServeMux()
		mux.HandleFunc("/v1/sales/{sale}/queue", func(_ http.ResponseWriter, r *http.Request) {
			routed, got = "queue", r.PathValue("sale")
		})
		mux.HandleFunc("/", func(http.ResponseWriter, *http.Request) { routed = "other" })
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if routed != "queue" || got != sale || w.Code != http.StatusOK || join != (method == http.MethodPost) ||
			(method != http.MethodPost && method != http.MethodGet) {
			t.Fatalf("%s %q: queuePathOf gives sale %q join %v, the mux routes to %q (sale %q, status %d)", method, target, sale, join, routed, got, w.Code)
		}
	})
}

// A place's ordinary paths do take the fast route; the draw's does not.
func TestQueuePathTakesThePlace(t *testing.T) {
	for _, c := range []struct {
		method, path string
		join, ok     bool
	}{
		{"POST", "/v1/sales/s1/queue", true, true},
		{"GET", "/v1/sales/flash-2026.11:A_1/queue", false, true},
		{"GET", "/v1/sales/s1/queue/draw", false, false},
		{"DELETE", "/v1/sales/s1/queue", false, false},
		{"POST", "/v1/sales/s1/orders", false, false},
	} {
		sale, join, ok := queuePathOf(c.method, c.path)
		if ok != c.ok || join != c.join || ok && "/v1/sales/"+sale+"/queue" != c.path {
			t.Errorf("%s %s: %q join %v ok %v", c.method, c.path, sale, join, ok)
		}
	}
}
