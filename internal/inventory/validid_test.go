package inventory_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/seckill/seckill/internal/inventory"
)

// idSpec is the contract's id rule, as docs/api.md writes it.
var idSpec = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)

// FuzzValidID: ValidID, of a string or of bytes, is the contract's rule.
func FuzzValidID(f *testing.F) {
	for _, s := range []string{"", "a", "u.1:x-y_z", "a b", strings.Repeat("x", 64), strings.Repeat("x", 65), "é", "a\n", "{x}", "a|b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := idSpec.MatchString(s)
		if inventory.ValidID(s) != want || inventory.ValidID([]byte(s)) != want {
			t.Fatalf("ValidID(%q) = %v, the contract says %v", s, inventory.ValidID(s), want)
		}
	})
}

// TestValidateBuyAllocatesNothingWhenValid: the buy path validates every
// buy at the service's edge and again at the engine's API, with the one
// rule (ValidateBuy); a valid buy must cost no allocation for it, and a
// bad one still gets its field named.
func TestValidateBuyAllocatesNothingWhenValid(t *testing.T) {
	lines := []inventory.Line{{SKU: "phone", Qty: 1}, {SKU: "case", Qty: 2}, {SKU: "cable", Qty: 3}}
	if n := testing.AllocsPerRun(100, func() {
		if err := inventory.ValidateBuy("launch", "alice", lines, "key-1"); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("ValidateBuy of a valid buy: %v allocations, want 0", n)
	}
	for _, c := range []struct {
		lines []inventory.Line
		field string
	}{
		{[]inventory.Line{{SKU: "a", Qty: 1}, {SKU: "b c", Qty: 1}}, "items[1].sku"},
		{[]inventory.Line{{SKU: "a", Qty: 1}, {SKU: "a", Qty: 1}}, "items[1].sku"},
		{[]inventory.Line{{SKU: "a", Qty: 1}, {SKU: "b", Qty: 0}}, "items[1].qty"},
		{[]inventory.Line{{SKU: "a", Qty: inventory.MaxQty + 1}}, "items[0].qty"},
	} {
		var inv *inventory.InvalidError
		if err := inventory.ValidateBuy("launch", "alice", c.lines, ""); !errors.As(err, &inv) || inv.Field != c.field {
			t.Errorf("ValidateBuy(%+v) = %v, want an InvalidError of field %s", c.lines, err, c.field)
		}
	}
}
