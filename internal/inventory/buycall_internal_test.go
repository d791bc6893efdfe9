package inventory

import (
	"testing"
)

// The keys of a sale are the documented ones (keys.go), each under the
// sale's hash tag, and buy.lua gets them in the order its header lists.
func TestSaleKeysNames(t *testing.T) {
	e := New(nil, Options{Prefix: "p"})
	k := e.keys("s-1")
	got := []string{k.tag, k.sale, k.bought, k.orders, k.idem, k.events, k.initLock, k.deadlines, k.paid, k.throttle, k.token,
		k.op("x"), k.archivedMark(), k.stage("t", "n")}
	want := []string{"{p:s-1}", "{p:s-1}:sale", "{p:s-1}:bought", "{p:s-1}:orders", "{p:s-1}:idem", "{p:s-1}:events",
		"{p:s-1}:initlock", "{p:s-1}:deadlines", "{p:s-1}:paid", "{p:s-1}:tat:", "{p:s-1}:ptoken:",
		"{p:s-1}:op:x", "{p:s-1}:archived", "{p:s-1}:stage:t:n"}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("key %d: %q, want %q", i, got[i], want[i])
		}
	}
	buy := k.buy()
	wantBuy := []string{"{p:s-1}:sale", "{p:s-1}:bought", "{p:s-1}:orders", "{p:s-1}:idem", "{p:s-1}:events",
		"{p:s-1}:tat:", "{p:s-1}:ptoken:", "{p:s-1}:deadlines", "{p:s-1}:room:live",
		"{p:s-1}:room:cfg", "{p:s-1}:room:b:"}
	if len(buy) != len(wantBuy) {
		t.Fatalf("buy keys %q", buy)
	}
	for i := range wantBuy {
		if buy[i] != wantBuy[i] {
			t.Errorf("buy key %d: %q, want %q", i, buy[i], wantBuy[i])
		}
	}
}

// sinkBuyCall and sinkKeys make the results escape, as they do when sent.
var (
	sinkBuyCall buyCall
	sinkKeys    saleKeys
)

// A buy's call is made in a fixed number of allocations, none of them for
// its sale's keys or its arguments: its order id (ulid's value escapes,
// then the id's string) and the lines' string. Its arguments are boxed when
// its call is built (batchCall), once per call for a shape it shares. The
// keys are the coalescer's, built once per sale, in one allocation for all
// of them. (Seen failing before the keys moved out of the call: 20
// allocations per call, 11 of them Engine.keys's; and 6 while a buy's
// arguments were boxed into a slice of its own.)
func TestBuyCallAllocations(t *testing.T) {
	e := New(nil, Options{})
	c, err := checkBuy(BuyRequest{SaleID: "s1", UserID: "u1", Lines: []Line{{SKU: "A", Qty: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { sinkBuyCall, _ = e.newBuyCall(c) }); n > 3 {
		t.Errorf("newBuyCall: %v allocations, want at most 3", n)
	}
	if n := testing.AllocsPerRun(100, func() { sinkKeys = e.keys("s1") }); n != 1 {
		t.Errorf("keys: %v allocations, want 1", n)
	}
}
