// Command openloop sends HTTP requests at a constant rate, whatever the
// server does, and reports their latencies: an open-loop load generator.
//
// A closed-loop tool such as wrk sends a connection's next request only when
// the previous reply has arrived, so when the server stalls it stops sending,
// and the requests that a real crowd would have sent meanwhile, and their
// wait, never appear in its latencies (coordinated omission). openloop
// instead schedules request i at t0 + i/rate and measures each latency from
// that scheduled time to the end of its reply's body: a reply that comes late
// because the server queued it, or because the generator itself could not
// send in time, counts all of its wait.
//
// The requests go out over --conns keep-alive connections, each with its
// own sender; requests that fall due while every connection is busy wait
// for one, their latencies counting the wait. At most --max-in-flight
// requests are outstanding (on a connection or waiting for one), and a
// request due while that many are outstanding waits for the cap. How far
// the sends fell behind their schedule, connection waits aside, is reported
// (sender lag), so a reader can tell whether the generator or the cap
// rather than the server held them back.
//
// Usage, as internal/bench/http/run.sh calls it:
//
//	go run ./bench/http/openloop --url http://127.0.0.1:18080/v1/sales/hot/orders \
//	    --tokens tokens.txt --rate 8000 --duration 10s
//
// Each request carries "Authorization: Bearer <token>", the tokens (one per
// line) taken round robin. Exit status: 0 when every scheduled request was
// sent and got a 2xx reply, 1 otherwise, 2 on bad flags.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/seckill/seckill/internal/bench/http/loadgen"
)

// Report is an attack's outcome (the package loadgen's, where the open loop
// lives so that `seckill bench --cost` shares it).
type Report = loadgen.Report

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// headerFlags collects repeated --header "Name: value" flags.
type headerFlags http.Header

func (h headerFlags) String() string { return "" }

func (h headerFlags) Set(s string) error {
	name, value, ok := strings.Cut(s, ":")
	if !ok || strings.TrimSpace(name) == "" {
		return fmt.Errorf("want \"Name: value\", got %q", s)
	}
	http.Header(h).Add(strings.TrimSpace(name), strings.TrimSpace(value))
	return nil
}

// run parses the flags, runs the attack, prints its report and returns the
// process exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("openloop", flag.ContinueOnError)
	fs.SetOutput(stderr)
	target := fs.String("url", "", "the URL to send every request to (required)")
	method := fs.String("method", http.MethodPost, "the requests' method")
	body := fs.String("body", `{"items":[{"sku":"A","qty":1}]}`, "the requests' body (empty for none)")
	contentType := fs.String("content-type", "application/json", "the requests' Content-Type (empty for none)")
	header := headerFlags{}
	fs.Var(header, "header", `an extra "Name: value" header of every request (repeatable)`)
	tokensFile := fs.String("tokens", "", `a file of bearer tokens, one per line, used round robin as "Authorization: Bearer <token>" (none: no Authorization header)`)
	rate := fs.Float64("rate", 0, "requests per second (required, > 0)")
	duration := fs.Duration("duration", 10*time.Second, "how long to send for: rate × duration requests are scheduled")
	timeout := fs.Duration("timeout", 30*time.Second, "how long one request may take once sent, reply body included")
	conns := fs.Int("conns", 512, "keep-alive connections to the server at most")
	maxInFlight := fs.Int("max-in-flight", 8192, "outstanding requests at most; when reached, sending waits and falls behind schedule")
	asJSON := fs.Bool("json", false, "print the report as one JSON object instead of text")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "openloop: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return bad("unexpected arguments %q", fs.Args())
	}
	if u, err := url.Parse(*target); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return bad("--url must be an http:// or https:// URL, got %q", *target)
	}
	if !(*rate > 0) || math.IsInf(*rate, 0) || *duration <= 0 || *timeout <= 0 || *conns < 1 || *maxInFlight < 1 {
		return bad("needs --rate > 0, --duration > 0, --timeout > 0, --conns >= 1, --max-in-flight >= 1")
	}
	a := loadgen.Attack{
		Method:      *method,
		URL:         *target,
		Header:      http.Header(header),
		Rate:        *rate,
		Duration:    *duration,
		Timeout:     *timeout,
		Conns:       *conns,
		MaxInFlight: *maxInFlight,
	}
	if a.Requests() < 1 {
		return bad("--rate × --duration schedules no request")
	}
	if *body != "" {
		a.Body = []byte(*body)
	}
	if *contentType != "" {
		a.Header.Set("Content-Type", *contentType)
	}
	if *tokensFile != "" {
		tokens, err := readTokens(*tokensFile)
		if err != nil {
			return bad("%v", err)
		}
		a.Tokens = tokens
	}

	r := a.Run(ctx)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			fmt.Fprintln(stderr, "openloop:", err)
			return 1
		}
	} else {
		r.WriteText(stdout)
	}
	if !r.OK() {
		return 1
	}
	return 0
}

// readTokens returns the non-blank lines of a file, trimmed.
func readTokens(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var tokens []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		if t := strings.TrimSpace(sc.Text()); t != "" {
			tokens = append(tokens, t)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("%s: no tokens", path)
	}
	return tokens, nil
}
