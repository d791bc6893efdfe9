package service_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/service"
)

// TestUnauthenticatedUploadsHoldLittle: 200 clients without a token each
// announce a 300 KiB body (under every body bound), send 250 KiB of it and
// stall, to the buy (served natively on fasthttp), a buyer's route and an
// operator's (through the adaptor). The service must not read what they
// send before it knows who they are: its heap never grows by more than
// uploadHeapBound (reading the bodies would take 200 × 250 KiB, 50 MB),
// and each is answered without waiting for the rest of its body. On both
// servers.
func TestUnauthenticatedUploadsHoldLittle(t *testing.T) {
	const (
		uploads         = 200
		announced, sent = 300 << 10, 250 << 10
		uploadHeapBound = 20 << 20
	)
	paths := []string{"/v1/sales/s1/orders", "/v1/sales/s1/purchase-tokens", "/v1/admin/sales", "/nowhere"}
	body := bytes.Repeat([]byte("x"), sent)
	for _, server := range []string{service.HTTPServerFast, service.HTTPServerNet} {
		t.Run(server, func(t *testing.T) {
			a := startApp(t, service.Config{DatabaseURL: dbtest.SQLiteURL(t), HTTPServer: server, SampleEvery: -1})
			addr := strings.TrimPrefix(a.svc.URL(), "http://")
			heap := func() int64 {
				runtime.GC()
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				return int64(m.HeapInuse)
			}
			base := heap()
			var (
				answered atomic.Int64
				mu       sync.Mutex
				replies  = map[string]int{}
			)
			for i := range uploads {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Close() })
				head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
					paths[i%len(paths)], addr, announced)
				go func() { // the upload: stalls after sent bytes
					_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
					_, _ = c.Write(append([]byte(head), body...))
				}()
				go func() { // the answer, if any comes before the server gives up
					_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
					b := make([]byte, 64)
					n, _ := io.ReadAtLeast(c, b, 12)
					mu.Lock()
					replies[string(b[:min(n, 12)])]++
					mu.Unlock()
					answered.Add(1)
				}()
			}
			var peak int64
			deadline := time.Now().Add(60 * time.Second)
			for answered.Load() < uploads && time.Now().Before(deadline) {
				peak = max(peak, heap()-base)
				if peak > uploadHeapBound {
					t.Fatalf("%d uploads without a token hold %.1f MB of the heap (bound %d MB); %d answered so far",
						uploads, float64(peak)/(1<<20), uploadHeapBound>>20, answered.Load())
				}
				time.Sleep(20 * time.Millisecond)
			}
			if n := answered.Load(); n < uploads {
				t.Fatalf("%d of %d uploads answered", n, uploads)
			}
			mu.Lock()
			defer mu.Unlock()
			if replies["HTTP/1.1 401"]+replies["HTTP/1.1 404"] != uploads {
				t.Fatalf("replies %v: want each 401 (or 404 for no route), before the body's end", replies)
			}
			t.Logf("peak heap growth %.1f MB; replies %v", float64(peak)/(1<<20), replies)
		})
	}
}
