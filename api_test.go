package seckill_test

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/seckill/seckill/internal/apisurface"
)

var update = flag.Bool("update", false, "rewrite api/seckill.txt from the code")

// maxNames is the most exported names (functions, types, methods,
// constants, variables; fields aside) the importable packages may have.
const maxNames = 150

// TestAPISurface keeps the public API deliberate: the exported names of the
// importable packages (the root package and lock) must be exactly those
// listed in api/seckill.txt, each with a doc comment, and at most maxNames.
// A change of the API updates the file on purpose: go test -run
// TestAPISurface -update . (and a line in CHANGELOG.md).
func TestAPISurface(t *testing.T) {
	decls, err := apisurface.Surface(".")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	names := 0
	for _, d := range decls {
		lines = append(lines, d.Line())
		if !d.Counted() {
			continue
		}
		names++
		if d.Doc == "" {
			t.Errorf("%s: no doc comment: say what it is for", d.Line())
		}
	}
	if names > maxNames {
		t.Errorf("%d exported names, more than %d: keep machinery in internal/", names, maxNames)
	}
	got := strings.Join(lines, "\n") + "\n"
	const path = "api/seckill.txt"
	if *update {
		if err := os.MkdirAll("api", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := string(raw); got != want {
		wantSet := map[string]bool{}
		for _, l := range strings.Split(strings.TrimSuffix(want, "\n"), "\n") {
			wantSet[l] = true
		}
		gotSet := map[string]bool{}
		for _, l := range lines {
			gotSet[l] = true
			if !wantSet[l] {
				t.Errorf("new in the API, not in %s: %s", path, l)
			}
		}
		for l := range wantSet {
			if !gotSet[l] {
				t.Errorf("in %s, gone from the API: %s", path, l)
			}
		}
		t.Log("if the change is deliberate: go test -run TestAPISurface -update . and a line in CHANGELOG.md")
	}
	t.Logf("%d exported names in %d declarations", names, len(decls))
}
