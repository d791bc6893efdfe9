package service_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill/seckill/internal/service"
)

// BenchmarkBuyHTTP: buys over HTTP against the service on the machine's
// Redis and PostgreSQL (consumer running), each request a distinct buyer,
// 64 connections; with the default per-user rate limit and without, to
// show what the limit's extra Redis call costs.
//
//	go test -run '^$' -bench BuyHTTP -benchtime 20000x ./service/
func BenchmarkBuyHTTP(b *testing.B) {
	for _, c := range []struct{ name, userLimit string }{{"ratelimit=default", ""}, {"ratelimit=off", "off"}} {
		b.Run(c.name, func(b *testing.B) {
			cfg := stacks[0].start(b)
			cfg.RateLimitUser = c.userLimit
			a := startApp(b, cfg)
			a.createSale("s1", 1, "A", int64(b.N)+1)
			tokens := make([]string, b.N)
			for i := range tokens {
				tokens[i] = a.token(fmt.Sprint("u", i))
			}
			body := []byte(`{"items":[{"sku":"A","qty":1}]}`)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			url := a.svc.URL() + "/v1/sales/s1/orders"
			var next, failed atomic.Int64
			b.SetParallelism(32) // 64 goroutines on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := next.Add(1) - 1
					req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
					req.Header.Set("Authorization", "Bearer "+tokens[i])
					resp, err := client.Do(req)
					if err != nil {
						failed.Add(1)
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusCreated {
						failed.Add(1)
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "buys/s")
			if failed.Load() > 0 {
				b.Fatalf("%d of %d buys failed", failed.Load(), b.N)
			}
		})
	}
}

// BenchmarkHTTPBuy: buys through the service's real handler, without a
// connection (net/http's server and client are not in it), on the
// machine's Redis and PostgreSQL with the consumer running, each request
// a distinct buyer with its own JWT, the default per-user rate limit on.
// ns/op and allocs/op are per buy, everything the process did meanwhile
// (Redis client, consumer) included; "harness" is what building the
// request and recorder costs alone, to take away.
//
//	go test -run '^$' -bench HTTPBuy -benchtime 20000x ./service/
func BenchmarkHTTPBuy(b *testing.B) {
	body := []byte(`{"items":[{"sku":"A","qty":1}]}`)
	newReq := func(token string) (*http.Request, *httptest.ResponseRecorder) {
		req := httptest.NewRequest("POST", "/v1/sales/s1/orders", bytes.NewReader(body))
		req.Header["Authorization"] = []string{"Bearer " + token}
		req.Header["Content-Type"] = []string{"application/json"}
		return req, httptest.NewRecorder()
	}
	b.Run("harness", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			newReq("x")
		}
	})
	b.Run("buy", func(b *testing.B) {
		a := startApp(b, stacks[0].start(b))
		a.createSale("s1", 1, "A", int64(b.N)+1)
		tokens := make([]string, b.N)
		for i := range tokens {
			tokens[i] = a.token(fmt.Sprint("u", i))
		}
		h := a.svc.Handler()
		var next, failed atomic.Int64
		b.SetParallelism(16) // 32 goroutines on 2 cores: buys are batched
		b.ReportAllocs()
		b.ResetTimer()
		cpu0 := processCPU()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				req, rec := newReq(tokens[next.Add(1)-1])
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusCreated {
					failed.Add(1)
				}
			}
		})
		b.StopTimer()
		b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		if failed.Load() > 0 {
			b.Fatalf("%d of %d buys failed", failed.Load(), b.N)
		}
	})
	// The same buy through `serve`'s fasthttp handler (fast.go), a
	// RequestCtx per buy as the server would reuse one per connection.
	b.Run("buy-fasthttp", func(b *testing.B) {
		cfg := stacks[0].start(b)
		cfg.HTTPServer = service.HTTPServerFast
		a := startApp(b, cfg)
		a.createSale("s1", 1, "A", int64(b.N)+1)
		tokens := make([]string, b.N)
		for i := range tokens {
			tokens[i] = a.token(fmt.Sprint("u", i))
		}
		h := a.svc.FastHandler()
		remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
		var next, failed atomic.Int64
		b.SetParallelism(16)
		b.ReportAllocs()
		b.ResetTimer()
		cpu0 := processCPU()
		b.RunParallel(func(pb *testing.PB) {
			var c fasthttp.RequestCtx
			var req fasthttp.Request
			for pb.Next() {
				req.Reset()
				req.Header.SetMethod("POST")
				req.SetRequestURI("/v1/sales/s1/orders")
				req.Header.Set("Authorization", "Bearer "+tokens[next.Add(1)-1])
				req.Header.SetContentType("application/json")
				req.SetBody(body)
				c.Init(&req, remote, nil)
				h(&c)
				if c.Response.StatusCode() != http.StatusCreated {
					failed.Add(1)
				}
			}
		})
		b.StopTimer()
		b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		if failed.Load() > 0 {
			b.Fatalf("%d of %d buys failed", failed.Load(), b.N)
		}
	})
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
