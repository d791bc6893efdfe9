package inventory

import (
	"errors"
	"strings"
	"testing"
)

// TestOrderUnitsPageTwice: a page HSCAN returns again, whole, adds
// nothing; a group's value that is not its orders is ErrCorrupt however
// it is found.
func TestOrderUnitsPageTwice(t *testing.T) {
	id := NewOrderID("s1")
	g := orderGroup(id)
	other := orderGroup(NewOrderID("s2"))
	page := []string{
		g, g + "0000|p|u1|1|A=1,B=2|\n" + g + "0001|c|u2|1|A=5|\n" + g + "0002|p|u3|1|B=4|",
		other, other + "0000|p|u4|1|A=7|",
	}
	u := newOrderUnits("s1")
	for range 3 {
		if err := u.page(page); err != nil {
			t.Fatal(err)
		}
	}
	if u.out["A"] != 8 || u.out["B"] != 6 || len(u.own) != 0 {
		t.Errorf("three times one page: %v, own %v; want A 8, B 6", u.out, u.own)
	}
	for name, v := range map[string]string{
		"an id twice":                   g + "0000|p|u1|1|A=1|\n" + g + "0000|p|u1|1|A=1|",
		"another group's id":            g + "0000|p|u1|1|A=1|\n" + other + "0001|p|u1|1|A=1|",
		"no id":                         "p|u7|1|A=3|",
		"empty":                         "",
		"a record that does not decode": g + "0000|x|u1|1|A=1|",
	} {
		err := newOrderUnits("s1").page([]string{g, v})
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v; want ErrCorrupt", name, err)
		} else if name != "a record that does not decode" && !strings.Contains(err.Error(), "order group "+g+" holds") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestFieldSetSeededPerScan: two scans hash one field apart.
func TestFieldSetSeededPerScan(t *testing.T) {
	a, b := newFieldSet(), newFieldSet()
	if !a.add("f") || a.add("f") || !a.has("f") || a.has("g") {
		t.Error("fieldSet does not track its fields")
	}
	b.add("f")
	for h := range a.seen {
		if _, same := b.seen[h]; same {
			t.Error("two scans hashed a field alike: one seed for both")
		}
	}
}
