package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRunDispatch(t *testing.T) {
	env := func(string) string { return "" }
	if code := run(context.Background(), nil, env); code != 2 {
		t.Errorf("no command: exit %d, want 2", code)
	}
	if code := run(context.Background(), []string{"nope"}, env); code != 2 {
		t.Errorf("unknown command: exit %d, want 2", code)
	}
}

func TestDemoCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	env := func(string) string { return "" } // embedded defaults
	code := runDemo(context.Background(), []string{"--buyers", "300", "--stock", "20"}, env, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "oversold") || !strings.Contains(errOut.String(), "not for production") {
		t.Errorf("unexpected output:\n%s\n%s", out.String(), errOut.String())
	}
	if code := runDemo(context.Background(), []string{"--redis", "http://nope"}, env, &out, &errOut); code != 2 {
		t.Errorf("bad --redis: exit %d, want 2", code)
	}
	if code := runDemo(context.Background(), []string{"--redis", "redis://127.0.0.1:1/0"}, env, &out, &errOut); code != 1 {
		t.Errorf("unreachable redis: exit %d, want 1", code)
	}
}
