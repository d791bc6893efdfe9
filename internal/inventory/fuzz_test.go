package inventory

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// idOK is an independent statement of the id rule.
func idOK(s string) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_.:-", c) >= 0
		if !ok {
			return false
		}
	}
	return true
}

// FuzzValidateBuy: ValidateBuy accepts exactly the buys the rules allow,
// and every refusal is an InvalidError naming a field.
func FuzzValidateBuy(f *testing.F) {
	f.Add("s1", "u1", "A", int64(1), "B", int64(2), "")
	f.Add("s1", "u1", "A", int64(0), "B", int64(2), "k")
	f.Add("s1", "u|1", "A", int64(1), "A", int64(1), "key with space")
	f.Add("", "u1", "A", int64(1_000_000_001), "B", int64(-1), "k")
	f.Add(strings.Repeat("x", 65), "u1", "A=1", int64(1), "B,2", int64(2), "\x00")
	f.Fuzz(func(t *testing.T, sale, user, sku1 string, q1 int64, sku2 string, q2 int64, key string) {
		lines := []Line{{SKU: sku1, Qty: q1}, {SKU: sku2, Qty: q2}}
		err := ValidateBuy(sale, user, lines, key)
		qtyOK := func(q int64) bool { return q >= 1 && q <= MaxQty }
		keyOK := len(key) <= 64 && !strings.ContainsFunc(key, func(r rune) bool { return r < 0x21 || r > 0x7e })
		want := idOK(sale) && idOK(user) && idOK(sku1) && idOK(sku2) && sku1 != sku2 && qtyOK(q1) && qtyOK(q2) && keyOK
		if (err == nil) != want {
			t.Fatalf("ValidateBuy(%q, %q, %v, %q) = %v, rules say valid=%v", sale, user, lines, key, err, want)
		}
		var inv *InvalidError
		if err != nil && (!errors.Is(err, ErrInvalid) || !errors.As(err, &inv) || inv.Field == "") {
			t.Fatalf("refusal %v is not an InvalidError with a field", err)
		}
	})
}

// FuzzOrderRecord: a record decodes to the order it encodes, and decoding
// anything never panics.
func FuzzOrderRecord(f *testing.F) {
	f.Add("u1", "A", int64(1), "k", true, int64(1_700_000_000_000))
	f.Add("u.2", "B:c", int64(1_000_000_000), "a|b", false, int64(0))
	f.Fuzz(func(t *testing.T, user, sku string, qty int64, key string, cancelled bool, ms int64) {
		_, _ = decodeRecord("s1.x", "s1", user+"|"+sku+"|"+key) // must not panic
		if !idOK(user) || !idOK(sku) || qty < 1 || validateIdempotencyKey(key) != nil || ms < 0 {
			return
		}
		o := Order{ID: "s1.x", SaleID: "s1", UserID: user, Status: OrderPending, IdempotencyKey: key,
			Items: []Line{{SKU: sku, Qty: qty}}, CreatedAt: time.UnixMilli(ms).UTC()}
		if cancelled {
			o.Status = OrderCancelled
		}
		got, err := decodeRecord(o.ID, o.SaleID, encodeRecord(o))
		if err != nil || !reflect.DeepEqual(got, o) {
			t.Fatalf("round trip of %+v = %+v, %v", o, got, err)
		}
	})
}

// FuzzSaleOfOrder: every id the engine makes names its sale; anything
// accepted names a valid sale id.
func FuzzSaleOfOrder(f *testing.F) {
	f.Add("s1", "s1.01JD0000000000000000000000")
	f.Add("a.b.c", "nope")
	f.Fuzz(func(t *testing.T, sale, id string) {
		if got, err := SaleOfOrder(id); err == nil && !idOK(got) {
			t.Fatalf("SaleOfOrder(%q) = %q, not a valid sale id", id, got)
		}
		if !idOK(sale) {
			return
		}
		if got, err := SaleOfOrder(NewOrderID(sale)); err != nil || got != sale {
			t.Fatalf("SaleOfOrder(NewOrderID(%q)) = %q, %v", sale, got, err)
		}
	})
}

// TestShortRepliesAreCorruptNotPanics: a reply shorter than its script
// promises (a script edited wrongly, a proxy mangling it) decodes as an
// error, never a panic or a wrong success.
func TestShortRepliesAreCorruptNotPanics(t *testing.T) {
	e := New(nil, Options{})
	placed := Order{ID: "s1.x", SaleID: "s1", Items: []Line{{SKU: "A", Qty: 1}, {SKU: "B", Qty: 1}}}
	for _, reply := range [][]any{
		{int64(codeOK)}, {int64(codeOK), int64(3)}, {int64(codeOK), "x", int64(3)},
		{int64(codeReplay)}, {int64(codeReplay), "s1.x"}, {int64(codeReplay), "s1.x", "garbage"},
		{int64(codeCorrupt)}, {int64(99)}, {int64(codeSoldOut), "A"},
	} {
		if _, err := e.decodeBuy(reply, buyCall{placed: placed}); !errors.Is(err, ErrCorrupt) {
			t.Errorf("decodeBuy(%v) err = %v, want ErrCorrupt", reply, err)
		}
	}
	for _, reply := range [][]any{{int64(codeNotActive)}, {int64(codeLimit)}, {int64(codeSoldOut)}, {int64(codeUnknown)}} {
		if _, err := e.decodeBuy(reply, buyCall{placed: placed}); err == nil {
			t.Errorf("decodeBuy(%v) succeeded", reply)
		}
	}
	// A batch reply must hold each buy's outcome after its length, each led
	// by its code, and nothing else.
	for _, reply := range [][]any{
		{int64(codeOK)}, {int64(codeOK), []any{int64(codeOK)}, "x"}, {int64(codeOK), []any{}},
		{int64(codeOK), []any{"0"}}, {int64(codeMissing)},
		{int64(codeOK), int64(1), int64(codeSpent)},                                    // one buy short
		{int64(codeOK), int64(1), int64(codeSpent), int64(3), int64(codeOK), int64(1)}, // a length past the end
		{int64(codeOK), int64(0), int64(1), int64(codeSpent)},                          // an empty outcome
		{int64(codeOK), int64(1), "7", int64(1), int64(codeSpent)},                     // a code not an integer
		{int64(codeOK), int64(1), int64(codeSpent), int64(1), int64(codeSpent), "x"},   // left over
		{int64(codeOK), "1", int64(codeSpent), int64(1), int64(codeSpent)},             // a length not an integer
	} {
		if _, err := buyReplies(reply, nil, 2); !errors.Is(err, ErrCorrupt) {
			t.Errorf("buyReplies(%v) err = %v, want ErrCorrupt", reply, err)
		}
	}
	good := []any{int64(codeOK), int64(1), int64(codeSpent), int64(3), int64(codeOK), int64(7), int64(4)}
	if got, err := buyReplies(good, nil, 2); err != nil || len(got) != 2 || len(got[0]) != 1 || len(got[1]) != 3 || got[1][2] != int64(4) {
		t.Errorf("buyReplies(%v) = %v, %v", good, got, err)
	}
}
