// Package apisurface lists the exported API of a module's importable
// packages, one declaration a line, as the Go project's api/*.txt files do:
// a checked-in copy of the list makes every change of the public API a
// deliberate one (see the root package's TestAPISurface).
//
// Importable packages are those outside internal/ and cmd/, that are not
// main packages and are not test-only. Test files are not read.
package apisurface

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Decl is one exported declaration of a package.
type Decl struct {
	// Package is the package's import path.
	Package string
	// Kind is "func", "method", "type", "const", "var" or "field".
	Kind string
	// Name is the declared name; a method's or a field's is
	// "Type.Name".
	Name string
	// Text is the declaration as the list shows it (its signature).
	Text string
	// Doc is the declaration's doc comment ("" if it has none).
	Doc string
}

// Counted reports whether the declaration counts as a name of the API:
// fields do not (they belong to their struct).
func (d Decl) Counted() bool { return d.Kind != "field" }

// Line is the declaration's line in the list.
func (d Decl) Line() string { return "pkg " + d.Package + ", " + d.Text }

// Surface lists the exported declarations of the importable packages of
// the module whose go.mod is in dir, sorted by line.
func Surface(dir string) ([]Decl, error) {
	module, err := modulePath(dir)
	if err != nil {
		return nil, err
	}
	var out []Decl
	err = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		name := e.Name()
		if rel != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" ||
			name == "internal" || rel == "cmd" || strings.HasPrefix(rel, "cmd/")) {
			return filepath.SkipDir
		}
		if rel != "." {
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
		}
		decls, err := packageDecls(p, path.Join(module, rel))
		out = append(out, decls...)
		return err
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Line() < out[j].Line() })
	return out, err
}

// modulePath reads the module path from dir's go.mod.
func modulePath(dir string) (string, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`), nil
		}
	}
	return "", fmt.Errorf("%s/go.mod names no module", dir)
}

// packageDecls lists the exported declarations of the package in dir.
func packageDecls(dir, rel string) ([]Decl, error) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	var out []Decl
	for name, pkg := range pkgs {
		if name == "main" {
			continue
		}
		l := lister{fset: fset, pkg: rel}
		files := make([]string, 0, len(pkg.Files))
		for f := range pkg.Files {
			files = append(files, f)
		}
		sort.Strings(files)
		for _, f := range files {
			if ast.IsGenerated(pkg.Files[f]) {
				continue
			}
			for _, d := range pkg.Files[f].Decls {
				l.decl(d)
			}
		}
		out = append(out, l.out...)
	}
	return out, nil
}

type lister struct {
	fset *token.FileSet
	pkg  string
	out  []Decl
}

func (l *lister) add(kind, name, text string, doc *ast.CommentGroup) {
	l.out = append(l.out, Decl{Package: l.pkg, Kind: kind, Name: name, Text: text, Doc: strings.TrimSpace(doc.Text())})
}

func (l *lister) print(n any) string {
	var b bytes.Buffer
	_ = (&printer.Config{Mode: printer.RawFormat}).Fprint(&b, l.fset, n)
	return strings.Join(strings.Fields(b.String()), " ")
}

func (l *lister) decl(d ast.Decl) {
	switch d := d.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() {
			return
		}
		sig := strings.TrimPrefix(l.print(&ast.FuncType{Params: d.Type.Params, Results: d.Type.Results, TypeParams: d.Type.TypeParams}), "func")
		if d.Recv == nil {
			l.add("func", d.Name.Name, "func "+d.Name.Name+sig, d.Doc)
			return
		}
		recv := receiver(d.Recv.List[0].Type)
		if recv == "" || !ast.IsExported(strings.TrimPrefix(recv, "*")) {
			return
		}
		base := strings.TrimPrefix(recv, "*")
		l.add("method", base+"."+d.Name.Name, "method ("+recv+") "+d.Name.Name+sig, d.Doc)
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				if !s.Name.IsExported() {
					continue
				}
				doc := s.Doc
				if doc == nil {
					doc = d.Doc
				}
				l.typeSpec(s, doc)
			case *ast.ValueSpec:
				doc := s.Doc
				if doc == nil {
					doc = d.Doc
				}
				for i, n := range s.Names {
					if !n.IsExported() {
						continue
					}
					text := d.Tok.String() + " " + n.Name
					if s.Type != nil {
						text += " " + l.print(s.Type)
					} else if d.Tok == token.CONST && i < len(s.Values) {
						text += " = " + l.print(s.Values[i])
					}
					l.add(d.Tok.String(), n.Name, text, doc)
				}
			}
		}
	}
}

func (l *lister) typeSpec(s *ast.TypeSpec, doc *ast.CommentGroup) {
	name := s.Name.Name
	tparams := ""
	if s.TypeParams != nil {
		tparams = l.print(&ast.FuncType{Params: s.TypeParams})
		tparams = "[" + strings.TrimSuffix(strings.TrimPrefix(tparams, "func("), ")") + "]"
	}
	alias := ""
	if s.Assign.IsValid() {
		alias = "= "
	}
	switch t := s.Type.(type) {
	case *ast.StructType:
		l.add("type", name, "type "+name+tparams+" "+alias+"struct", doc)
		for _, f := range t.Fields.List {
			typ := l.print(f.Type)
			if len(f.Names) == 0 {
				if n := strings.TrimPrefix(typ, "*"); ast.IsExported(path.Base(strings.ReplaceAll(n, ".", "/"))) {
					l.add("field", name+"."+n, "type "+name+" struct, embedded "+typ, f.Doc)
				}
				continue
			}
			for _, n := range f.Names {
				if n.IsExported() {
					l.add("field", name+"."+n.Name, "type "+name+" struct, "+n.Name+" "+typ, f.Doc)
				}
			}
		}
	case *ast.InterfaceType:
		l.add("type", name, "type "+name+tparams+" "+alias+"interface", doc)
		for _, m := range t.Methods.List {
			for _, n := range m.Names {
				if n.IsExported() {
					sig := strings.TrimPrefix(l.print(m.Type), "func")
					l.add("method", name+"."+n.Name, "type "+name+" interface, "+n.Name+sig, m.Doc)
				}
			}
			if len(m.Names) == 0 {
				l.add("field", name+"."+l.print(m.Type), "type "+name+" interface, embedded "+l.print(m.Type), m.Doc)
			}
		}
	default:
		l.add("type", name, fmt.Sprintf("type %s%s %s%s", name, tparams, alias, l.print(s.Type)), doc)
	}
}

// receiver is the receiver's type as written: "T", "*T" (type parameters dropped).
func receiver(e ast.Expr) string {
	star := ""
	if s, ok := e.(*ast.StarExpr); ok {
		star, e = "*", s.X
	}
	switch t := e.(type) {
	case *ast.IndexExpr:
		e = t.X
	case *ast.IndexListExpr:
		e = t.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return star + id.Name
	}
	return ""
}
