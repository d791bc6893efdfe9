package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seckill/seckill/internal/admission"
)

// TestDrawVerifyCommand: "seckill draw verify" passes a published draw and
// prints its order, fails a tampered one with the check that failed, and
// tells a record it cannot read from one that does not check.
func TestDrawVerifyCommand(t *testing.T) {
	secret, _, err := admission.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	d, err := admission.RunDraw("launch", secret, []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, v any) string {
		t.Helper()
		b, ok := v.([]byte)
		if !ok {
			if b, err = json.Marshal(v); err != nil {
				t.Fatal(err)
			}
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	good := write("good.json", d)
	swapped := d
	swapped.Order = slices.Clone(d.Order)
	swapped.Order[2], swapped.Order[5] = swapped.Order[5], swapped.Order[2]
	otherSecret := d
	otherSecret.Secret = strings.Repeat("0", 64)
	goodJSON, _ := json.Marshal(d)

	for _, c := range []struct {
		name     string
		args     []string
		stdin    string
		code     int
		stdout   []string // the lines printed, nil for none
		stderrIn string   // what the one line on stderr names
	}{
		{"good", []string{"--file", good}, "", 0, d.Order, ""},
		{"good on stdin", []string{"--file", "-"}, string(goodJSON), 0, d.Order, ""},
		{"order swapped", []string{"--file", write("swapped.json", swapped)}, "", 1, nil, "order check failed"},
		{"another secret", []string{"--file", write("secret.json", otherSecret)}, "", 1, nil, "commitment check failed"},
		{"before the draw", []string{"--file", write("before.json", admission.Draw{Commitment: d.Commitment})}, "", 1, nil, "has not run"},
		{"no --file", nil, "", 2, nil, "--file"},
		{"an argument too", []string{"--file", good, "extra"}, "", 2, nil, "--file"},
		{"missing file", []string{"--file", filepath.Join(dir, "nope.json")}, "", 2, nil, "no such file"},
		{"not JSON", []string{"--file", write("text.json", []byte("commitment: x\n"))}, "", 2, nil, "not a draw's JSON"},
		{"a number for the order", []string{"--file", write("shape.json", []byte(`{"commitment":"x","order":5}`))}, "", 2, nil, "not a draw's JSON"},
		{"data after the record", []string{"--file", "-"}, string(goodJSON) + " {}", 2, nil, "data after"},
	} {
		t.Run(c.name, func(t *testing.T) {
			drawStdin = strings.NewReader(c.stdin)
			t.Cleanup(func() { drawStdin = os.Stdin })
			var out, errOut bytes.Buffer
			code := run(context.Background(), append([]string{"draw", "verify"}, c.args...), func(string) string { return "" }, &out, &errOut)
			if code != c.code {
				t.Errorf("exit %d, want %d; stderr %q", code, c.code, errOut.String())
			}
			var lines []string
			if out.Len() > 0 {
				lines = strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			}
			if !slices.Equal(lines, c.stdout) {
				t.Errorf("stdout %q, want %q", lines, c.stdout)
			}
			if c.stderrIn == "" {
				if errOut.Len() != 0 {
					t.Errorf("stderr %q, want nothing", errOut.String())
				}
			} else if s := errOut.String(); !strings.Contains(s, c.stderrIn) || strings.Count(s, "\n") != 1 {
				t.Errorf("stderr %q, want one line naming %q", s, c.stderrIn)
			}
		})
	}

	// The draw's own commands: none but verify.
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"draw"}, func(string) string { return "" }, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "verify") {
		t.Errorf("draw alone: exit %d, %q", code, errOut.String())
	}
	if code := run(context.Background(), []string{"draw", "shuffle"}, func(string) string { return "" }, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "unknown command") {
		t.Errorf("draw shuffle: exit %d, %q", code, errOut.String())
	}
}
