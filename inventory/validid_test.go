package inventory_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/seckill/seckill/inventory"
)

// idSpec is the contract's id rule, as api.md writes it.
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
