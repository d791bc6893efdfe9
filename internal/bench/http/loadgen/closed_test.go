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

// TestClosedExtraHeader: request i carries Extra[i] beside Tokens[i], so a
// buyer's own header (an admission) travels with its own token; Extra of
// another length than Tokens is refused without a request.
func TestClosedExtraHeader(t *testing.T) {
	url, tokens, extra, check := extraHeaderServer(t)
	c := Closed{Method: http.MethodPost, URL: url, Tokens: tokens, Extra: extra,
		Conns: 3, Duration: time.Minute, Timeout: 10 * time.Second}
	if r := c.Run(context.Background()); r.Status2xx != 50 || r.Errors != 0 {
		t.Fatalf("report %+v, want 50 2xx", r)
	}
	check()
	c.Extra = extra[:10]
	if r := c.Run(context.Background()); r.Sent != 0 || r.Errors != 1 || r.Status2xx != 0 {
		t.Errorf("10 extra headers for 50 tokens: report %+v, want one error and nothing sent", r)
	}
}

// extraHeaderServer is a server that records which X-Purchase-Token came
// with which bearer token, and 50 tokens with a header each; check fails
// the test unless every token came with its own header.
func extraHeaderServer(t *testing.T) (url string, tokens, extra []string, check func()) {
	t.Helper()
	var mu sync.Mutex
	pairs := map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		pairs[r.Header.Get("Authorization")] = r.Header.Get("X-Purchase-Token")
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	tokens, extra = make([]string, 50), make([]string, 50)
	for i := range tokens {
		tokens[i], extra[i] = fmt.Sprint("t", i), fmt.Sprint("X-Purchase-Token: p", i)
	}
	return srv.URL, tokens, extra, func() {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		for i := range tokens {
			if got := pairs[fmt.Sprint("Bearer t", i)]; got != fmt.Sprint("p", i) {
				t.Errorf("token t%d came with X-Purchase-Token %q, want p%d", i, got, i)
			}
		}
	}
}
