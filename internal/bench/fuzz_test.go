package bench

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

// FuzzSelect: --only is a comma-separated list of approach names. Select
// accepts it exactly when every trimmed name is known (a blank list means
// all); it then returns the named approaches once each, in the order of
// Names, and its error names every unknown one.
func FuzzSelect(f *testing.F) {
	names := Names()
	f.Add("")
	f.Add(strings.Join(names, ","))
	f.Add(" " + names[len(names)-1] + " , " + names[0] + "," + names[0])
	f.Add(names[0] + ",nope,,x y")
	f.Fuzz(func(t *testing.T, list string) {
		got, err := Select(list)
		if strings.TrimSpace(list) == "" {
			if err != nil || !slices.Equal(got, names) {
				t.Fatalf("Select(%q) = %v, %v; want every approach", list, got, err)
			}
			return
		}
		var asked, unknown []string
		for _, n := range strings.Split(list, ",") {
			n = strings.TrimSpace(n)
			if slices.Contains(names, n) {
				asked = append(asked, n)
			} else {
				unknown = append(unknown, n)
			}
		}
		if len(unknown) > 0 {
			if err == nil {
				t.Fatalf("Select(%q) = %v; want an error naming %q", list, got, unknown)
			}
			for _, n := range unknown {
				if !strings.Contains(err.Error(), strconv.Quote(n)) {
					t.Fatalf("Select(%q) error %q does not name %q", list, err, n)
				}
			}
			return
		}
		if err != nil {
			t.Fatalf("Select(%q) = %v", list, err)
		}
		var want []string
		for _, n := range names {
			if slices.Contains(asked, n) {
				want = append(want, n)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("Select(%q) = %v, want %v", list, got, want)
		}
	})
}
