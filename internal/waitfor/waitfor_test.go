package waitfor

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestUntilReturnsOnceTrue(t *testing.T) {
	calls := 0
	Until(t, Patience, "third call", func() error {
		if calls++; calls < 3 {
			return fmt.Errorf("call %d", calls)
		}
		return nil
	})
	if calls != 3 {
		t.Fatalf("cond called %d times, want 3", calls)
	}
}

// fatalTB records Fatalf and ends the goroutine, as testing's does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestUntilFailsAfterDeadline(t *testing.T) {
	f := &fatalTB{}
	began := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		Until(f, 50*time.Millisecond, "never", func() error { return errors.New("still no") })
	}()
	<-done
	if time.Since(began) < 50*time.Millisecond {
		t.Errorf("gave up after %v, before its deadline", time.Since(began))
	}
	if !strings.Contains(f.msg, "never") || !strings.Contains(f.msg, "still no") {
		t.Fatalf("Fatalf message %q lacks what was awaited and the last error", f.msg)
	}
}
