// Package waitfor lets a test wait for a condition instead of sleeping and
// hoping: it polls until the condition holds, and fails the test only after a
// deadline generous enough for a loaded machine running the race detector,
// saying what it last saw.
package waitfor

import (
	"testing"
	"time"
)

// Patience is the deadline to use for something that takes milliseconds on
// an idle machine: the whole -race suite runs packages in parallel on as few
// as two cores, so it can take a hundred times longer.
const Patience = 30 * time.Second

// interval is how often Until polls.
const interval = 10 * time.Millisecond

// Until calls cond every few milliseconds until it returns nil, and calls
// tb.Fatalf with what and cond's last error if that has not happened within
// the given time. cond's error says what is not so yet.
func Until(tb testing.TB, within time.Duration, what string, cond func() error) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %v: %v", what, within, err)
			return
		}
		time.Sleep(interval)
	}
}
