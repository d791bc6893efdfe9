package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/seckill/seckill/internal/dbtest"
)

func TestRunDispatch(t *testing.T) {
	env := func(string) string { return "" }
	var out, errOut bytes.Buffer
	if code := run(context.Background(), nil, env, &out, &errOut); code != 2 {
		t.Errorf("no command: exit %d, want 2", code)
	}
	if code := run(context.Background(), []string{"nope"}, env, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "unknown command") {
		t.Errorf("unknown command: exit %d, %q", code, errOut.String())
	}
	if code := run(context.Background(), []string{"help"}, env, &out, &errOut); code != 0 || !strings.Contains(out.String(), "serve") {
		t.Errorf("help: exit %d, %q", code, out.String())
	}
}

// TestDemoCommand runs the README's first command, small, on embedded defaults.
func TestDemoCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	env := func(string) string { return "" }
	code := run(context.Background(), []string{"demo", "--buyers", "300", "--stock", "20"}, env, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "oversold") || !strings.Contains(out.String(), "all invariants held") {
		t.Errorf("unexpected output:\n%s", out.String())
	}
}

func TestStartFailuresAreOneLine(t *testing.T) {
	cases := map[string][]string{
		"unreachable redis":    {"serve", "--addr", "127.0.0.1:0", "--redis", "redis://127.0.0.1:1/0", "--db", dbtest.SQLiteURL(t)},
		"unreachable database": {"serve", "--addr", "127.0.0.1:0", "--db", "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2"},
		"bad database url":     {"serve", "--addr", "127.0.0.1:0", "--db", "mysql://x"},
	}
	for name, args := range cases {
		var out, errOut bytes.Buffer
		code := run(context.Background(), args, func(string) string { return "" }, &out, &errOut)
		lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
		last := lines[len(lines)-1]
		if code != 1 || !strings.HasPrefix(last, "seckill: ") {
			t.Errorf("%s: exit %d, stderr:\n%s", name, code, errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"reconcile"}, func(string) string { return "" }, &out, &errOut); code != 2 {
		t.Errorf("reconcile without --sale: exit %d", code)
	}
}
