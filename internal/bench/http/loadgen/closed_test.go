package loadgen

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// TestClosedTokensOnce: every token is sent exactly once, the run stops when
// they run out, and the replies are counted by status.
func TestClosedTokensOnce(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("Authorization")]++
		mu.Unlock()
		if r.Header.Get("Authorization") == "Bearer t7" {
			w.WriteHeader(http.StatusConflict)
		}
	}))
	defer srv.Close()
	tokens := make([]string, 100)
	for i := range tokens {
		tokens[i] = fmt.Sprint("t", i)
	}
	r := Closed{Method: http.MethodPost, URL: srv.URL, Body: []byte("{}"), Tokens: tokens,
		Conns: 4, Duration: time.Minute, Timeout: 10 * time.Second}.Run(context.Background())
	if !r.OutOfTokens || r.Sent != 100 || r.Status2xx != 99 || r.Non2xx != 1 || r.Non2xxByStatus[http.StatusConflict] != 1 || r.Errors != 0 {
		t.Errorf("report %+v, want out of tokens, 100 sent, 99 2xx, one 409", r)
	}
	if len(seen) != 100 {
		t.Errorf("%d distinct tokens arrived, want 100", len(seen))
	}
	for tok, n := range seen {
		if n != 1 {
			t.Errorf("%s sent %d times, want once", tok, n)
		}
	}
	if r.Rate2xx <= 0 || r.LatencyMS.Max <= 0 {
		t.Errorf("rate %v, max latency %v; want both positive", r.Rate2xx, r.LatencyMS.Max)
	}
}
