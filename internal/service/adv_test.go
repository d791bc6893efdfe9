package service_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Adversarial bodies of a buy: each is a 400 invalid_argument that changes
// nothing, whichever reader (fast or reflective) takes it.
func TestAdvBuyBadBodiesChangeNothing(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		a.createSale("s1", 1000, "A", 1000, "B", 1000)
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		_, _ = zw.Write([]byte(`{"items":[{"sku":"A","qty":1}]}`))
		_ = zw.Close()
		bodies := []string{
			`{"items":[{"sku":"A","qty":1,}]}`,
			`{"items":[{"qty":1,"sku":"A",}]}`,
			`{"items":[{"sku":"A","qty":1},{"sku":"B","qty":1,}]}`,
			`{"items":[{"sku":"A","qty":1},]}`,
			`{"items":[{"sku":"A","qty":1}],}`,
			`{"items":[{"sku":"A","qty":1}]} x`,
			`{"items":[{"sku":"A","qty":1}]}{"items":[{"sku":"B","qty":1}]}`,
			`{"items":[{"sku":"A","qty":1}]} null`,
			"\ufeff" + `{"items":[{"sku":"A","qty":1}]}`,
			`{"items":[{"sku":"A","qty":1}] /* c */}`,
			`{"items":[{"sku":"A","qty":01}]}`,
			`{"items":[{"sku":"A","qty":+1}]}`,
			`{"items":[{"sku":"A","qty":1e0}]}`,
			`{"items":[{"sku":"A","qty":1.0}]}`,
			`{"items":[{"sku":"A","qty":-1}]}`,
			`{"items":[{"sku":"A","qty":-0}]}`,
			`{"items":[{"sku":"A","qty":0}]}`,
			`{"items":[{"sku":"A","qty":1000000001}]}`,
			`{"items":[{"sku":"A","qty":999999999999999999}]}`,
			`{"items":[{"sku":"A","qty":9223372036854775808}]}`,
			`{"items":[{"sku":"A","qty":99999999999999999999999}]}`,
			`{"items":[{"sku":"A","qty":NaN}]}`,
			`{"items":[{"sku":"A","qty":null}]}`,
			`{"items":[{"sku":null,"qty":1}]}`,
			`{"items":[{"sku":"A"}]}`,
			`{"items":[{"qty":1}]}`,
			`{"items":[{"sku":"A","qty":1,"price":0}]}`,
			`{"items":[{"sku":"A","qty":1}],"user":"bob"}`,
			`{"items":[{"sku":"A","qty":1,"sku":"B"}]}`,
			`{"items":[{"sku":"A","qty":1,"qty":2}]}`,
			`{"items":[{"sku":"A","qty":1}],"items":[{"sku":"B","qty":1}]}`,
			`{"Items":[{"sku":"A","qty":1}]}`,
			`{"items":[{"SKU":"A","qty":1}]}`,
			`{"items":[{"sku":"A","qty":1},{"sku":"A","qty":1}]}`,
			`{"items":[]}`,
			`{"items":null}`,
			`{"items":{}}`,
			`{}`,
			`[]`,
			`null`,
			``,
			` `,
			`{"items":[{"sku":"A B","qty":1}]}`,
			`{"items":[{"sku":"","qty":1}]}`,
			`{"items":[{"sku":"A\n","qty":1}]}`,
			`{"items":[{"sku":"A\u0000","qty":1}]}`,
			`{"items":[{"sku":"` + strings.Repeat("A", 65) + `","qty":1}]}`,
			`{"items":[{"sku":"é","qty":1}]}`,
			`{"items":[{"sku":"A","qty":true}]}`,
			`{"items":[{"sku":1,"qty":1}]}`,
			`{"items":[["A",1]]}`,
			`{"items":[{"sku":"A","qty":1}]`,
			`{"items":[{"sku":"A","qty":1`,
			gz.String(),
		}
		for i, body := range bodies {
			a.settle("s1")
			before := a.state("s1")
			r := a.call("POST", "/v1/sales/s1/orders", a.token(fmt.Sprintf("adv%d", i)), body)
			if r.status != http.StatusBadRequest || r.code(t) != "invalid_argument" {
				t.Errorf("body %q: %d %s, want 400 invalid_argument", body, r.status, r.body)
			}
			a.settle("s1")
			if after := a.state("s1"); !reflect.DeepEqual(before, after) {
				t.Errorf("body %q changed the sale: %+v -> %+v", body, before, after)
			}
		}
	})
}

// chunked is a reader of unknown length: the client sends it chunked,
// without a Content-Length.
type chunked struct{ io.Reader }

// postChunked POSTs body to path as user with no Content-Length (chunked),
// with headers (name, value pairs) besides the token, and reads the reply.
func (a *app) postChunked(path, user, body string, headers ...string) reply {
	a.t.Helper()
	req, err := http.NewRequest("POST", a.svc.URL()+path, chunked{strings.NewReader(body)})
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.token(user))
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: raw}
}

// Bodies without a Content-Length (chunked) are read as those with one,
// and over 64 KiB they are refused.
func TestAdvBuyChunkedBodies(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		a.createSale("s1", 1000, "A", 1000)
		send := func(user, body string) reply { return a.postChunked("/v1/sales/s1/orders", user, body) }
		if r := send("c1", `{"items":[{"sku":"A","qty":2}]}`); r.status != http.StatusCreated {
			t.Fatalf("chunked buy: %d %s", r.status, r.body)
		}
		a.settle("s1")
		before := a.state("s1")
		big := `{"items":[{"sku":"A","qty":1}]}` + strings.Repeat(" ", 70<<10)
		if r := send("c2", big); r.status != http.StatusBadRequest {
			t.Errorf("chunked body over 64 KiB: %d %s", r.status, r.body)
		}
		spaced := `{"items":[{"sku":"A","qty":1}]}` + strings.Repeat(" ", 63<<10)
		if r := send("c3", spaced); r.status != http.StatusCreated {
			t.Errorf("chunked body under 64 KiB: %d %s", r.status, r.body)
		}
		a.settle("s1")
		if after := a.state("s1"); reflect.DeepEqual(before, after) {
			t.Errorf("the buy under 64 KiB changed nothing")
		}
	})
}

// Many buys at once, of bodies of every size, some with a Content-Length
// and some chunked, interleaved with short malformed ones: every answer
// carries its own request id, user and items (the pooled buffers of the
// body and of the answer never mix two requests), and every malformed
// body is a 400. Run with -race.
func TestAdvBuyConcurrentBodiesDoNotMix(t *testing.T) {
	cfg := stacks[0].start(t)
	cfg.RateLimitUser = "off"
	a := startApp(t, cfg)
	var skus []any
	for i := range 20 {
		skus = append(skus, fmt.Sprintf("S%02d", i), 1_000_000)
	}
	a.createSale("s1", 1_000_000, skus...)
	const workers, each = 16, 12
	errs := make(chan error, workers*each)
	done := make(chan struct{})
	for w := range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for j := range each {
				user := fmt.Sprintf("w%d-%d", w, j)
				n := 1 + (w+j)%5
				var items []string
				var want []any
				for k := range n {
					sku := fmt.Sprintf("S%02d", (w*7+j*3+k)%20)
					qty := 1 + (w*j+k)%9
					items = append(items, fmt.Sprintf(`{"sku":%q,"qty":%d}`, sku, qty))
					want = append(want, []any{sku, float64(qty)})
				}
				pad := strings.Repeat(" ", []int{0, 10, 900, 3000, 17000, 40000}[(w+j)%6])
				body := `{"items":[` + strings.Join(items, ",") + `]}` + pad
				bad := j%3 == 2
				if bad {
					body = `{"items":[{"sku":"S01","qty":1}` + pad // cut short: malformed
				}
				var rd io.Reader = strings.NewReader(body)
				if (w+j)%2 == 1 {
					rd = chunked{rd}
				}
				reqID := fmt.Sprintf("req-%d-%d", w, j)
				req, _ := http.NewRequest("POST", a.svc.URL()+"/v1/sales/s1/orders", rd)
				req.Header.Set("Authorization", "Bearer "+a.token(user))
				req.Header.Set("X-Request-Id", reqID)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					errs <- err
					continue
				}
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if got := resp.Header.Get("X-Request-Id"); got != reqID {
					errs <- fmt.Errorf("%s: X-Request-Id %q", reqID, got)
				}
				if bad {
					if resp.StatusCode != http.StatusBadRequest {
						errs <- fmt.Errorf("%s: malformed body: %d %s", reqID, resp.StatusCode, raw)
					}
					continue
				}
				if resp.StatusCode != http.StatusCreated {
					errs <- fmt.Errorf("%s: %d %s", reqID, resp.StatusCode, raw)
					continue
				}
				r := reply{status: resp.StatusCode, body: raw}
				o := r.json(t)
				var got []any
				lines, _ := o["items"].([]any)
				for _, l := range lines {
					m, _ := l.(map[string]any)
					got = append(got, []any{m["sku"], m["qty"]})
				}
				if o["user_id"] != user || !reflect.DeepEqual(got, want) {
					errs <- fmt.Errorf("%s: user %v items %v, want %s %v: %s", reqID, o["user_id"], got, user, want, raw)
				}
			}
		}()
	}
	for range workers {
		<-done
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	a.settle("s1")
}

// A Content-Length longer than the body sent (the client then stops
// writing) is a 400 or a dropped connection, never an order; one shorter
// than the body buys what it covers, and the rest is the next request on
// the connection (HTTP's framing), answered on its own.
func TestAdvBuyLyingContentLength(t *testing.T) {
	cfg := stacks[0].start(t)
	a := startApp(t, cfg)
	a.createSale("s1", 1000, "A", 1000)
	addr := strings.TrimPrefix(a.svc.URL(), "http://")
	raw := func(req string) string {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Write([]byte(req))
		_ = c.(*net.TCPConn).CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		out, _ := io.ReadAll(c)
		return string(out)
	}
	body := `{"items":[{"sku":"A","qty":1}]}`
	a.settle("s1")
	before := a.state("s1")
	out := raw("POST /v1/sales/s1/orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + a.token("liar1") +
		"\r\nContent-Length: " + fmt.Sprint(len(body)+20) + "\r\n\r\n" + body)
	if strings.Contains(out, " 201 ") {
		t.Errorf("a body shorter than its Content-Length bought: %q", out)
	}
	a.settle("s1")
	if after := a.state("s1"); !reflect.DeepEqual(before, after) {
		t.Errorf("a short body changed the sale: %+v -> %+v", before, after)
	}
	// Shorter: the first 20 bytes are malformed JSON: 400; the rest is not
	// a request: 400 from net/http.
	out = raw("POST /v1/sales/s1/orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + a.token("liar2") +
		"\r\nContent-Length: 20\r\n\r\n" + body)
	if strings.Contains(out, " 201 ") || !strings.Contains(out, " 400 ") {
		t.Errorf("a body longer than its Content-Length: %q", out)
	}
	a.settle("s1")
	if after := a.state("s1"); !reflect.DeepEqual(before, after) {
		t.Errorf("a long body changed the sale: %+v -> %+v", before, after)
	}
}
