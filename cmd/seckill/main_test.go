package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/waitfor"
)

func TestRunDispatch(t *testing.T) {
	env := func(string) string { return "" }
	var out, errOut bytes.Buffer
	if code := run(context.Background(), nil, env, &out, &errOut); code != 2 {
		t.Errorf("no command: exit %d, want 2", code)
	}
	if code := run(context.Background(), []string{"nope"}, env, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "unknown command") {
		t.Errorf("unknown command: exit %d, %q", code, errOut.String())
	}
	if code := run(context.Background(), []string{"help"}, env, &out, &errOut); code != 0 || !strings.Contains(out.String(), "serve") {
		t.Errorf("help: exit %d, %q", code, out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"token", "--user", "alice", "--jwt-secret", "s"}, env, &out, &errOut); code != 0 || strings.Count(out.String(), ".") != 2 {
		t.Errorf("token: exit %d, %q", code, out.String())
	}
	if code := run(context.Background(), []string{"token", "--user", "alice"}, env, &out, &errOut); code != 2 {
		t.Errorf("token without a secret: exit %d", code)
	}
	// --count: one token per buyer, each for its own sub.
	out.Reset()
	if code := run(context.Background(), []string{"token", "--user", "b", "--count", "3", "--jwt-secret", "s"}, env, &out, &errOut); code != 0 {
		t.Fatalf("token --count: exit %d", code)
	}
	toks := strings.Fields(out.String())
	if len(toks) != 3 {
		t.Fatalf("token --count 3 printed %d tokens", len(toks))
	}
	for i, tok := range toks {
		claims := jwt.MapClaims{}
		if _, err := jwt.ParseWithClaims(tok, claims, func(*jwt.Token) (any, error) { return []byte("s"), nil }); err != nil || claims["sub"] != fmt.Sprintf("b-%d", i+1) {
			t.Errorf("token %d: sub %v, %v", i, claims["sub"], err)
		}
	}
	if code := run(context.Background(), []string{"token", "--user", "b", "--count", "-1", "--jwt-secret", "s"}, env, &out, &errOut); code != 2 {
		t.Errorf("token --count -1: exit %d", code)
	}
}

// TestDemoCommand runs the README's first command, small, on embedded defaults.
func TestDemoCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	env := func(string) string { return "" }
	code := run(context.Background(), []string{"demo", "--buyers", "300", "--stock", "20"}, env, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "oversold") || !strings.Contains(out.String(), "all invariants held") {
		t.Errorf("unexpected output:\n%s", out.String())
	}
}

func TestStartFailuresAreOneLine(t *testing.T) {
	cases := map[string][]string{
		"unreachable redis":    {"serve", "--addr", "127.0.0.1:0", "--redis", "redis://127.0.0.1:1/0", "--db", dbtest.SQLiteURL(t)},
		"unreachable database": {"serve", "--addr", "127.0.0.1:0", "--db", "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2"},
		"bad database url":     {"serve", "--addr", "127.0.0.1:0", "--db", "mysql://x"},
	}
	for name, args := range cases {
		var out, errOut bytes.Buffer
		code := run(context.Background(), args, func(string) string { return "" }, &out, &errOut)
		lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
		last := lines[len(lines)-1]
		if code != 1 || !strings.HasPrefix(last, "seckill: ") {
			t.Errorf("%s: exit %d, stderr:\n%s", name, code, errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"reconcile"}, func(string) string { return "" }, &out, &errOut); code != 2 {
		t.Errorf("reconcile without --sale: exit %d", code)
	}
	// Bad configuration of seckill's own: exit 2, one line naming it.
	for _, args := range [][]string{{"--log-format", "xml"}, {"--log-level", "loud"}, {"--instances", "0"}} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"serve", "--addr", "127.0.0.1:0"}, args...), func(string) string { return "" }, &out, &errOut)
		if code != 2 || !strings.Contains(errOut.String(), args[0]) || strings.Count(strings.TrimSpace(errOut.String()), "\n") > 0 {
			t.Errorf("serve %v: exit %d, stderr %q", args, code, errOut.String())
		}
	}
	// A bad rate limit is refused by the service at start.
	errOut.Reset()
	code := run(context.Background(), []string{"serve", "--addr", "127.0.0.1:0", "--db", dbtest.SQLiteURL(t)},
		func(k string) string { return map[string]string{"SECKILL_RATE_LIMIT_USER": "fast"}[k] }, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), `bad user rate limit "fast"`) {
		t.Errorf("SECKILL_RATE_LIMIT_USER=fast: exit %d, stderr %q", code, errOut.String())
	}
}

// lockedBuffer is a bytes.Buffer safe for a logger and a reader at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServe runs `seckill serve` with configuration from the environment,
// waits for its ready line, uses it, and stops it as SIGTERM would.
func TestServe(t *testing.T) {
	env := map[string]string{
		"SECKILL_ADDR":         "127.0.0.1:0",
		"SECKILL_DATABASE_URL": dbtest.SQLiteURL(t),
		"SECKILL_ADMIN_TOKEN":  "t0ken",
		"SECKILL_JWT_SECRET":   "s3cret",
		"SECKILL_LOG_FORMAT":   "json",
		"SECKILL_LOG_LEVEL":    "debug",
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var out, errOut lockedBuffer
	exit := make(chan int, 1)
	go func() { exit <- run(ctx, []string{"serve"}, func(k string) string { return env[k] }, &out, &errOut) }()

	addr := regexp.MustCompile(`"msg":"seckill ready","addr":"(http://[^"]+)"`)
	var base string
	for deadline := time.Now().Add(waitfor.Patience); base == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := addr.FindStringSubmatch(errOut.String()); m != nil {
			base = m[1]
		}
	}
	if base == "" {
		t.Fatalf("no ready line:\n%s", errOut.String())
	}
	req, _ := http.NewRequest("POST", base+"/v1/admin/sales", strings.NewReader(`{"id":"s1","items":[{"sku":"A","stock":3}]}`))
	req.Header.Set("Authorization", "Bearer t0ken") // the token from the environment
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create sale: %v %v", resp, err)
	}
	resp.Body.Close()
	if strings.Contains(errOut.String(), "t0ken") || strings.Contains(errOut.String(), "s3cret") {
		t.Error("configured secrets were logged")
	}
	// JSON logs: every line an object; the request's lines carry its id.
	reqID := resp.Header.Get("X-Request-Id")
	var withID int
	for _, line := range strings.Split(strings.TrimSpace(errOut.String()), "\n") {
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatalf("a log line is not JSON: %q", line)
		}
		if entry["request_id"] == reqID {
			withID++
		}
	}
	if withID < 2 { // the audit line and the request line
		t.Errorf("%d log lines carry the request id %s, want 2:\n%s", withID, reqID, errOut.String())
	}
	stop()
	select {
	case code := <-exit:
		if code != 0 {
			t.Errorf("exit %d after shutdown:\n%s", code, errOut.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop")
	}
}
