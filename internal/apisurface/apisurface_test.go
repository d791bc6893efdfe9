package apisurface

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, root, name, text string) {
	t.Helper()
	p := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSurface(t *testing.T) {
	root := t.TempDir()
	write(t, root, "go.mod", "module example.com/m\n\ngo 1.22\n")
	write(t, root, "m.go", `package m

// Thing is a thing.
type Thing struct {
	// Name names it.
	Name string
	hidden int
}

// Do does.
func (t *Thing) Do(n int) error { return nil }

func (t *Thing) quiet() {}

type hidden struct{}

// Exported on an unexported type: not part of the API.
func (hidden) Exported() {}

// New makes one.
func New() *Thing { return nil }

// The answers.
const (
	Yes = "yes"
	no  = "no"
)

var Undocumented int

// Alias is another name.
type Alias = Thing
`)
	write(t, root, "m_test.go", "package m\n\nfunc TestOnly() {}\n")
	write(t, root, "internal/x/x.go", "package x\n\n// Hidden is internal.\nfunc Hidden() {}\n")
	write(t, root, "cmd/tool/main.go", "package main\n\nfunc main() {}\n")
	write(t, root, "sub/sub.go", "package sub\n\n// Iface is an interface.\ntype Iface interface {\n\t// Get gets.\n\tGet() string\n}\n")

	decls, err := Surface(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	counted, undocumented := 0, 0
	for _, d := range decls {
		got = append(got, d.Line())
		if d.Counted() {
			counted++
			if d.Doc == "" {
				undocumented++
			}
		}
	}
	want := []string{
		"pkg example.com/m, const Yes = \"yes\"",
		"pkg example.com/m, func New() *Thing",
		"pkg example.com/m, method (*Thing) Do(n int) error",
		"pkg example.com/m, type Alias = Thing",
		"pkg example.com/m, type Thing struct",
		"pkg example.com/m, type Thing struct, Name string",
		"pkg example.com/m, var Undocumented int",
		"pkg example.com/m/sub, type Iface interface",
		"pkg example.com/m/sub, type Iface interface, Get() string",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("surface:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if counted != 8 || undocumented != 1 {
		t.Errorf("counted %d names, %d undocumented; want 8, 1 (the field does not count; Undocumented has no doc)", counted, undocumented)
	}
}
