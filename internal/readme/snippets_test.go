package readme_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// goBlock is a ```go block of the README: its text up to the closing fence.
var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

// TestGoSnippetsBuild builds every ```go block of the README as written:
// each is a whole program (package main), built inside this module, so a
// snippet that stops compiling when the API changes fails here.
func TestGoSnippetsBuild(t *testing.T) {
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go") // the go that runs this test
	raw, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlock.FindAllStringSubmatch(string(raw), -1)
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```go block")
	}
	for i, b := range blocks {
		src := b[1]
		if !strings.HasPrefix(src, "package main\n") {
			t.Errorf("README go block %d is not a whole program (package main): a reader cannot paste it", i+1)
			continue
		}
		// A directory inside the module, so the block's imports resolve
		// against this module's go.mod, as in a program of a user's that
		// requires it.
		dir, err := os.MkdirTemp(".", "snippet")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		out, err := exec.CommandContext(ctx, goTool, "build", "-o", os.DevNull, "./"+filepath.Base(dir)).CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("README go block %d does not build: %v\n%s", i+1, err, out)
		}
	}
}
