//go:build unix

package lock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pausedHolderEnv, when set (to a Redis address), makes TestPausedHolder the
// lock holder of a test that stops it: see pausedHolder.
const pausedHolderEnv = "SECKILL_LOCK_PAUSED_HOLDER"

// TestPausedHolder stops a real process that holds a lock (SIGSTOP, as a GC
// pause, a VM migration or a debugger would) right after it checked that
// its lease is valid and before its write, for longer than the TTL. Another
// holder takes the lock and writes. When the stopped process resumes, its
// write carries a stale fence and the guard refuses it; its watchdog and
// its loss handling neither renew nor delete the new holder's lock; its
// lease ends as lost, and its Release says so.
func TestPausedHolder(t *testing.T) {
	if addr := os.Getenv(pausedHolderEnv); addr != "" {
		pausedHolder(t, addr)
		return
	}
	t.Parallel()
	l, c := ownLocker(t)
	ctx := context.Background()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPausedHolder$", "-test.v")
	cmd.Env = append(os.Environ(), pausedHolderEnv+"="+c.Options().Addr)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	// expect waits for the child's next line starting with prefix (the
	// test framework prints lines of its own) and returns the rest.
	expect := func(prefix string) string {
		t.Helper()
		timeout := time.After(patience)
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("the holder exited before it said %q", prefix)
				}
				if rest, found := strings.CutPrefix(line, prefix); found {
					return rest
				}
			case <-timeout:
				t.Fatalf("the holder did not say %q", prefix)
			}
		}
	}

	var oldFence Fence
	if _, err := fmt.Sscan(expect("holder: fence "), &oldFence); err != nil {
		t.Fatal(err)
	}
	expect("holder: checked")
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Stopped past its TTL: the lock expires in Redis, and someone else takes it.
	next, err := l.Acquire(ctx, "job", WithTTL(5*time.Second), WithRetry(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if next.Fence() <= oldFence {
		t.Fatalf("the next holder's fence %d is not above the paused holder's %d", next.Fence(), oldFence)
	}
	g, err := NewGuard(c, "own")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Set(ctx, "stock", next.Fence(), "next"); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(stdin, "write\n"); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}

	if got := expect("holder: write "); got != "stale" {
		t.Errorf("the paused holder's write after it woke up: %s, want it refused as stale", got)
	}
	if got := expect("holder: lease "); got != "lost" {
		t.Errorf("the paused holder's lease after it woke up: %s, want lost", got)
	}
	if got := expect("holder: release "); got != "lost" {
		t.Errorf("the paused holder's Release: %s, want it to report the lock lost", got)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("the holder: %v", err)
	}
	if v, f, err := g.Get(ctx, "stock"); err != nil || v != "next" || f != next.Fence() {
		t.Errorf("the guarded value: %q with fence %d, %v; want the next holder's", v, f, err)
	}
	// The woken holder's watchdog and cleanup left the new holder's lock alone.
	if owner, err := c.Get(ctx, next.keys.lock()).Result(); err != nil || owner != next.Token() {
		t.Errorf("the lock after the paused holder woke up: %q, %v; want the next holder's token", owner, err)
	}
	if err := next.Extend(ctx); err != nil || next.Context().Err() != nil {
		t.Errorf("the next holder after the paused one woke up: Extend %v, context %v", err, context.Cause(next.Context()))
	}
}

// pausedHolder is the process TestPausedHolder stops: it takes the lock
// with a short TTL and its watchdog running, checks its lease, says so, and
// then (stopped there, and woken up) writes with its fence when told to.
func pausedHolder(t *testing.T, addr string) {
	c := nodeClient(t, addr)
	l, err := New(c, Options{Prefix: "own"})
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGuard(c, "own")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lease, err := l.Acquire(ctx, "job", WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("holder: fence %d\n", lease.Fence())
	if lease.Context().Err() != nil {
		t.Fatal("lost at once")
	}
	fmt.Println("holder: checked")
	// The parent stops this process here, and sends "write" before it
	// lets it go on.
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() || in.Text() != "write" {
		t.Fatalf("told %q", in.Text())
	}
	switch err := g.Set(ctx, "stock", lease.Fence(), "paused holder"); {
	case errors.Is(err, ErrStaleFence):
		fmt.Println("holder: write stale")
	default:
		fmt.Printf("holder: write accepted (%v)\n", err)
	}
	select {
	case <-lease.Context().Done():
		if errors.Is(context.Cause(lease.Context()), ErrLost) {
			fmt.Println("holder: lease lost")
		} else {
			fmt.Printf("holder: lease ended: %v\n", context.Cause(lease.Context()))
		}
	case <-time.After(patience):
		fmt.Println("holder: lease still valid")
	}
	if err := lease.Release(ctx); errors.Is(err, ErrLost) {
		fmt.Println("holder: release lost")
	} else {
		fmt.Printf("holder: release %v\n", err)
	}
}
