// Package golden compares a test's lines with a golden file's, line by
// line: a test kit for answers recorded once and pinned since.
package golden

import (
	"os"
	"strings"
	"testing"
)

// Compare fails t for every line of got that differs from the same line of
// the file at path (one answer a line), naming the line and both sides.
func Compare(t testing.TB, path string, got []string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	for i := range max(len(got), len(want)) {
		g, w := "(none)", "(none)"
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Errorf("answer %d:\n got %s\nwant %s", i, g, w)
		}
	}
}
