package service

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestFastAdaptedRequestOwnsItsStrings: a request fasthttp hands to the
// service's http.Handler (every route but the buy) must keep its strings
// once its reply is sent. fasthttpadaptor's point into the connection's
// buffers, which its next request overwrites: a sale id from the path
// kept as a cache's key (settings, from a purchase token's route; the
// archived sales, from a sale's read) or a header's value kept anywhere
// would turn into the bytes of a later request. The probe keeps what a
// first request gave it, a second request of the same lengths and other
// bytes follows on the same connection, and what was kept must not have
// changed.
func TestFastAdaptedRequestOwnsItsStrings(t *testing.T) {
	type kept struct{ method, path, sale, query, host, header, body string }
	var got []kept
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/sales/{sale}/purchase-tokens", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, kept{r.Method, r.URL.Path, r.PathValue("sale"), r.URL.RawQuery, r.Host, r.Header.Get("X-Probe"), string(b)})
		w.WriteHeader(http.StatusNoContent)
	})
	s := &Service{log: slog.New(slog.DiscardHandler)}
	srv := s.newFastServer(mux)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })

	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	send := func(sale, v string) {
		t.Helper()
		req := "POST /v1/sales/" + sale + "/purchase-tokens?q=" + v + " HTTP/1.1\r\nHost: h" + v + "\r\nX-Probe: " + v +
			"\r\nContent-Length: 3\r\n\r\n" + v
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	send("saleAAA", "aaa")
	send("saleZZZ", "zzz")
	want := kept{"POST", "/v1/sales/saleAAA/purchase-tokens", "saleAAA", "q=aaa", "haaa", "aaa", "aaa"}
	if len(got) != 2 || got[0] != want {
		t.Fatalf("the first request's strings, once the second was served: %+v; want %+v", got[0], want)
	}
	if !strings.Contains(got[1].path, "saleZZZ") {
		t.Fatalf("second request: %+v", got[1])
	}
}
