package service

import (
	"net/http"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// headerOnlyWriter is a ResponseWriter that keeps the header map and drops
// the rest.
type headerOnlyWriter struct{ h http.Header }

func (w headerOnlyWriter) Header() http.Header       { return w.h }
func (headerOnlyWriter) WriteHeader(int)             {}
func (headerOnlyWriter) Write(b []byte) (int, error) { return len(b), nil }

// sinkHeader makes every map of the test escape alike.
var sinkHeader http.Header

// hardened is a header map as harden leaves it, on the heap as net/http's.
func hardened() http.Header {
	h := make(http.Header)
	sinkHeader = h
	h["X-Request-Id"] = cacheControlNoStore // any shared value: only the count matters
	for _, sh := range securityHeaders {
		h[sh.name] = sh.value
	}
	return h
}

// A reply written after harden allocates nothing for its headers beyond
// Content-Type's entry itself: in particular, its header map, full at 8
// entries, is not grown to a table by assigning Cache-Control again. (Seen
// failing with writeOrder and writeJSON assigning Cache-Control
// unconditionally: 5 allocations against 2.)
func TestJSONRepliesDoNotGrowTheHeaderMap(t *testing.T) {
	o := inventory.Order{ID: "o1", SaleID: "s1", UserID: "u1", Status: inventory.OrderPending,
		Items: []inventory.Line{{SKU: "A", Qty: 1}}, CreatedAt: time.Unix(1_800_000_000, 0).UTC()}
	remaining := []int64{41}
	floor := testing.AllocsPerRun(100, func() {
		h := hardened()
		h["Content-Type"] = contentTypeJSON
	})
	x := &httpExchange{} // harden's, made with its request (exchangeOf)
	order := testing.AllocsPerRun(100, func() {
		x.w = headerOnlyWriter{hardened()}
		writeOrderTo(x, http.StatusCreated, o, remaining)
	})
	headers := testing.AllocsPerRun(100, func() { jsonHeaders(hardened()) })
	if order != floor || headers != floor {
		t.Fatalf("allocations: a hardened map with Content-Type %v, writeOrder %v, jsonHeaders %v", floor, order, headers)
	}
	h := hardened()
	jsonHeaders(h)
	if len(h) != 8 || h.Get("Cache-Control") != "no-store" || h.Get("Content-Type") != "application/json" {
		t.Fatalf("headers %v", h)
	}
	bare := http.Header{"Cache-Control": {"max-age=60"}}
	if jsonHeaders(bare); len(bare["Cache-Control"]) != 1 || bare.Get("Cache-Control") != "no-store" {
		t.Fatalf("Cache-Control not replaced: %v", bare)
	}
}
