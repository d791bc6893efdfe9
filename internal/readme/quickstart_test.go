// Package readme_test runs what the README tells a newcomer to paste.
package readme_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/redistest"
)

// repoRoot is where the README's commands run, as a reader runs them
// from a clone.
const repoRoot = "../.."

// quickstartMark precedes each ```sh block of the README that
// TestQuickstart runs, in their order in the README.
const quickstartMark = "<!-- test: quickstart -->"

// TestQuickstart runs the README's quickstart blocks, as written, with
// bash against the machine's Redis and PostgreSQL: the block builds and
// starts `seckill serve`, waits until it is ready, creates a sale, buys,
// reconciles and stops the server. The buy must answer 201 and the
// reconciliation be consistent. It runs in a listen address, a Redis key
// prefix and a PostgreSQL schema of its own (the block takes them from
// the environment when they are set); whatever the block leaves running
// is killed with its process group, and the keys and schema are removed.
func TestQuickstart(t *testing.T) {
	bash, _ := tool(t, "bash"), tool(t, "curl")
	raw, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := markedBlocks(string(raw), quickstartMark)
	if len(blocks) == 0 {
		t.Fatalf("README.md has no ```sh block after %q", quickstartMark)
	}

	rdb := redistest.Standalone(t)
	env := []string{
		"SECKILL_ADDR=" + freeAddr(t),
		"SECKILL_REDIS_URL=" + redistest.URL(),
		"SECKILL_KEY_PREFIX=" + redistest.Prefix(t, rdb),
		"SECKILL_DATABASE_URL=" + dbtest.PostgresURL(t),
		// The go tool that runs this test builds what the block builds.
		"PATH=" + filepath.Join(runtime.GOROOT(), "bin") + string(os.PathListSeparator) + os.Getenv("PATH"),
	}
	for _, kv := range os.Environ() {
		// Nothing of the caller's own configuration reaches the service.
		if !strings.HasPrefix(kv, "SECKILL_") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bash, "-e", "-x", "-c", strings.Join(blocks, "\n"))
	cmd.Dir, cmd.Env = repoRoot, env
	// Its own process group, so that the server the block starts in the
	// background is stopped with it, whatever happened.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	killGroup := func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.Cancel = killGroup
	// The block must stop what it starts: a server left running holds the
	// output open after bash exits, and Wait gives up on it after this.
	cmd.WaitDelay = 5 * time.Second
	var all lockedBuffer
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = writerFunc(func(p []byte) (int, error) {
		all.Write(p)
		return stdout.Write(p) // only the command's goroutine for stdout writes here
	}), &all
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = killGroup() })
	switch err := cmd.Wait(); {
	case errors.Is(err, exec.ErrWaitDelay):
		t.Fatalf("the quickstart left a process running (it must stop the server it starts):\n%s", all.String())
	case err != nil:
		t.Fatalf("the quickstart failed: %v\n%s", err, all.String())
	}

	out := stdout.String()
	if !regexp.MustCompile(`(?m)^\{"order_id":.*\nHTTP 201$`).MatchString(out) {
		t.Errorf("the buy did not answer 201 (want its order, then \"HTTP 201\"):\n%s", all.String())
	}
	if !strings.Contains(out, `"consistent":true`) {
		t.Errorf("reconcile is not consistent:\n%s", all.String())
	}
}

// markedBlocks returns the body of every ```sh block that follows a line
// holding mark, in order.
func markedBlocks(text, mark string) []string {
	var blocks []string
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != mark || i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "```sh" {
			continue
		}
		var body []string
		for i += 2; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, lines[i])
		}
		blocks = append(blocks, strings.Join(body, "\n"))
	}
	return blocks
}

// tool is the path of a program the test needs. A machine without it
// skips the test; CI (CI=true) must run it, so there it fails.
func tool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s not on PATH (CI must have it: apt-get install %s)", name, name)
	}
	t.Skipf("%s not on PATH", name)
	return ""
}

// freeAddr returns 127.0.0.1:<a port that was free a moment ago>.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// lockedBuffer is a buffer two goroutines may write.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
