package service_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/service"
)

// TestLiveStreamCaps: the live view's event streams are capped per client
// address (429) and in all (503), both with Retry-After; a stream that
// closes gives its place back. Clients are told apart by X-Forwarded-For
// from a trusted proxy (the test's loopback).
func TestLiveStreamCaps(t *testing.T) {
	a := startApp(t, service.Config{DatabaseURL: dbtest.SQLiteURL(t), SampleEvery: -1, TrustedProxies: []string{"127.0.0.1"},
		LiveStreamsPerClient: 2, LiveStreams: 3})
	open := func(client string) (*http.Response, context.CancelFunc) { return openLiveStream(t, a, client) }
	want := func(resp *http.Response, status int, what string) {
		t.Helper()
		if resp.StatusCode != status {
			t.Fatalf("%s: status %d, want %d", what, resp.StatusCode, status)
		}
		if status != http.StatusOK && resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s: %d without Retry-After", what, status)
		}
	}
	r1, closeA1 := open("10.0.0.1")
	want(r1, http.StatusOK, "first stream of A")
	r2, _ := open("10.0.0.1")
	want(r2, http.StatusOK, "second stream of A")
	r3, _ := open("10.0.0.1")
	want(r3, http.StatusTooManyRequests, "third stream of A (2 per client)")
	r4, _ := open("10.0.0.2")
	want(r4, http.StatusOK, "first stream of B")
	r5, _ := open("10.0.0.3")
	want(r5, http.StatusServiceUnavailable, "first stream of C (3 in all)")
	// JSON answers are not streams: never capped.
	req, _ := http.NewRequest("GET", a.svc.URL()+"/v1/live", nil)
	req.Header.Set("X-Forwarded-For", "10.0.0.1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	want(resp, http.StatusOK, "JSON sample from A")

	closeA1()
	waitFor(t, "a closed stream gives its place back", func() bool {
		r, cancel := open("10.0.0.3")
		defer cancel()
		return r.StatusCode == http.StatusOK
	})
}

// openLiveStream opens a live event stream for client, as told by
// X-Forwarded-For (the service must trust the test's loopback): once it
// answers 200, after its first sample, when the stream is counted.
func openLiveStream(t *testing.T, a *app, client string) (*http.Response, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", a.svc.URL()+"/v1/live", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("X-Forwarded-For", client)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusOK { // wait for the first sample: the stream is counted
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "event: sample") {
			t.Fatalf("first line of the stream: %q, %v", line, err)
		}
	}
	t.Cleanup(func() { cancel(); _ = resp.Body.Close() })
	return resp, cancel
}

// TestLiveStreamCapGroupsIPv6By64: one IPv6 client holds a /64 (any of its
// addresses is its own to pick), so the per-client cap counts the /64's
// streams together; another /64 is another client, and IPv4 clients are
// told apart by address.
func TestLiveStreamCapGroupsIPv6By64(t *testing.T) {
	a := startApp(t, service.Config{DatabaseURL: dbtest.SQLiteURL(t), SampleEvery: -1, TrustedProxies: []string{"127.0.0.1"},
		LiveStreamsPerClient: 2, LiveStreams: 64})
	for _, c := range []struct {
		client string
		status int
	}{
		{"2001:db8:1:2::1", http.StatusOK},
		{"2001:db8:1:2::2", http.StatusOK},
		{"2001:db8:1:2:ffff:ffff:ffff:ffff", http.StatusTooManyRequests},
		{"2001:db8:1:2:abcd::9", http.StatusTooManyRequests},
		{"2001:db8:1:3::1", http.StatusOK},
		{"10.0.0.1", http.StatusOK},
		{"10.0.0.2", http.StatusOK},
		{"10.0.0.3", http.StatusOK},
	} {
		if resp, _ := openLiveStream(t, a, c.client); resp.StatusCode != c.status {
			t.Errorf("a stream for %s: status %d, want %d", c.client, resp.StatusCode, c.status)
		}
	}
}

// waitFor polls cond until it holds, or fails the test after a generous
// deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
