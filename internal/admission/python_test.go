package admission

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDrawAgreesWithPython: testdata/verify_draw.py, the pinned algorithm
// written again in Python from the contract, recomputes a draw RunDraw
// made from the published record alone (and the entries from the sale and
// its buyers' ids) and agrees with it exactly. Without python3 on PATH it
// skips, except in CI (CI=true), where it fails.
func TestDrawAgreesWithPython(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 is not on PATH; CI must have it")
		}
		t.Skip("python3 is not on PATH")
	}
	script, err := filepath.Abs(filepath.Join("testdata", "verify_draw.py"))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for _, c := range []struct {
		name  string
		users []string
		file  bool // the user ids in a side file, else as arguments
	}{
		{"300 buyers in a file", randomUsers(rng, 300), true},
		{"5 buyers as arguments", randomUsers(rng, 5), false},
		{"nobody", nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			const sale = "launch-ü"
			d, err := RunDraw(sale, testSecret, c.users)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			record := filepath.Join(dir, "draw.json")
			b, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(record, b, 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{script, record, "--sale", sale}
			if c.file {
				users := filepath.Join(dir, "users.txt")
				if err := os.WriteFile(users, []byte(strings.Join(c.users, "\n")+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--users", users)
			} else {
				args = append(args, c.users...)
			}
			cmd := exec.Command(python, args...)
			cmd.Env = append(os.Environ(), "PYTHONUTF8=1")
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, stderrOf(err))
			}
			var py struct {
				Commitment, Digest, Seed string
				Entries, Order           []string
			}
			if err := json.Unmarshal(out, &py); err != nil {
				t.Fatalf("python printed %q: %v", out, err)
			}
			if py.Commitment != d.Commitment || py.Digest != d.Digest || py.Seed != d.Seed {
				t.Errorf("commitment, digest, seed:\npython %s %s %s\ngo     %s %s %s",
					py.Commitment, py.Digest, py.Seed, d.Commitment, d.Digest, d.Seed)
			}
			if !slices.Equal(py.Entries, d.Entries) {
				t.Errorf("python's entries from the buyers' ids differ from Go's:\n%q\n%q", py.Entries, d.Entries)
			}
			if !slices.Equal(py.Order, d.Order) {
				t.Errorf("python's order differs from Go's:\n%q\n%q", py.Order, d.Order)
			}
			if len(py.Order) != len(c.users) {
				t.Errorf("python ordered %d entries, want %d", len(py.Order), len(c.users))
			}
		})
	}
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
