package service_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// The dashboard's tests: the data source it relies on (GET /v1/live as
// server-sent events), and the page itself in headless Chromium.

// pageWait bounds every wait for the page or the stream to show something.
const pageWait = 20 * time.Second

// screenshotEnv names the variable that makes TestDashboard write
// docs/dashboard.png.
const screenshotEnv = "SECKILL_UPDATE_SCREENSHOT"

// liveApp starts the service on real Redis and PostgreSQL with a live view
// sampled five times a second.
func liveApp(t *testing.T) *app {
	t.Helper()
	for _, st := range stacks {
		if st.name == "redis+postgres" {
			cfg := st.start(t)
			cfg.SampleEvery = 200 * time.Millisecond
			return startApp(t, cfg)
		}
	}
	t.Fatal("no redis+postgres stack in the harness")
	return nil
}

// buy places one order and requires it to be accepted.
func (a *app) buy(sale, user string, skuQty ...any) {
	a.t.Helper()
	var items []map[string]any
	for i := 0; i+1 < len(skuQty); i += 2 {
		items = append(items, map[string]any{"sku": skuQty[i], "qty": skuQty[i+1]})
	}
	mustStatus(a.t, a.call("POST", "/v1/sales/"+sale+"/orders", a.token(user), map[string]any{"items": items}), http.StatusCreated)
}

// TestLiveStream: GET /v1/live with Accept: text/event-stream streams
// "sample" events whose data is the live view, and a buy shows in a later
// sample. The dashboard has nothing else to go on.
func TestLiveStream(t *testing.T) {
	a := liveApp(t)
	sale := fmt.Sprintf("stream-%04d", rand.IntN(10000))
	a.createSale(sale, 5, "A", 5)

	ctx, cancel := context.WithTimeout(context.Background(), pageWait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", a.svc.URL()+"/v1/live", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("GET /v1/live: %d, Content-Type %q; want 200 and text/event-stream", resp.StatusCode, ct)
	}

	events := bufio.NewScanner(resp.Body)
	events.Buffer(nil, 1<<20)
	var last string // the newest sample's data, for the failure message
	// waitRemaining reads samples until one shows the sale's item A with
	// the remaining stock.
	waitRemaining := func(want int64) {
		t.Helper()
		event := ""
		for events.Scan() {
			line := events.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				if event != "sample" {
					t.Fatalf("data of event %q, want %q: %s", event, "sample", line)
				}
				last = strings.TrimPrefix(line, "data: ")
				var v struct {
					Sales []struct {
						ID    string `json:"id"`
						Items []struct {
							SKU       string `json:"sku"`
							Remaining int64  `json:"remaining"`
						} `json:"items"`
					} `json:"sales"`
				}
				if err := json.Unmarshal([]byte(last), &v); err != nil {
					t.Fatalf("sample is not JSON: %v: %s", err, last)
				}
				for _, s := range v.Sales {
					if s.ID == sale && len(s.Items) == 1 && s.Items[0].SKU == "A" && s.Items[0].Remaining == want {
						return
					}
				}
			case line == "":
				event = ""
			}
		}
		t.Fatalf("no sample showed %s/A with %d remaining within %v (%v); last sample: %s", sale, want, pageWait, events.Err(), last)
	}
	waitRemaining(5)
	a.buy(sale, "u1", "A", 2)
	waitRemaining(3)

	// An open stream does not hold up shutdown: the server ends it.
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := a.svc.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown with a live stream open: %v", err)
	}
	for events.Scan() {
	}
	if err := events.Err(); err != nil && ctx.Err() != nil {
		t.Fatalf("the stream was not ended by the server: %v", err)
	}
}

// chromium returns the browser the page test runs. CI has one; a machine
// without one skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no chromium, chromium-browser or google-chrome on PATH (CI must have one: apt-get install chromium)")
	}
	t.Skip("no chromium, chromium-browser or google-chrome on PATH")
	return ""
}

// browser is a tab in a headless Chromium of the test's own, and what the
// tab did: every URL it requested and every error it reported.
type browser struct {
	ctx context.Context

	mu       sync.Mutex
	requests []*network.EventRequestWillBeSent
	problems []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox, // the tests run as root
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	// Cleanups run last-in first-out: the browser closes (and its live
	// stream with it) before the service shuts down.
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{ctx: ctx}
	if err := chromedp.Do(ctx); err != nil { // starts the browser, opens the tab
		t.Fatalf("start %s: %v", chromium(t), err)
	}
	err := chromedp.Listen(ctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			b.requests = append(b.requests, ev)
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			b.problems = append(b.problems, fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber+1, msg))
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning ||
				ev.Type == runtime.ConsoleAPICalledTypeAssert {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				b.problems = append(b.problems, fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " ")))
			}
		case *log.EventEntryAdded: // failed loads, CSP violations, ...
			if e := ev.Entry; e.Level == log.EntryLevelError || e.Level == log.EntryLevelWarning {
				b.problems = append(b.problems, fmt.Sprintf("%s %s: %s %s", e.Source, e.Level, e.Text, e.URL))
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// reported lists what the page reported, for a failure message.
func (b *browser) reported() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.problems) == 0 {
		return ""
	}
	return "\nthe page reported:\n\t" + strings.Join(b.problems, "\n\t")
}

// checkClean fails the test if the page reported an error or asked for
// anything but the service's own URLs.
func (b *browser) checkClean(t *testing.T, origin string) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		t.Errorf("the page reported: %s", p)
	}
	live := false
	for _, r := range b.requests {
		u := r.Request.URL
		if !strings.HasPrefix(u, origin+"/") {
			t.Errorf("the page loaded %s (%s), not from %s", u, r.Type, origin)
		}
		live = live || (u == origin+"/v1/live" && r.Type == network.ResourceTypeEventSource)
	}
	if !live {
		t.Errorf("the page opened no EventSource on %s/v1/live", origin)
	}
}

// shownSale is what the page shows of one sale.
type shownSale struct {
	Found  bool                 `json:"found"`
	Status string               `json:"status"`
	Items  map[string]shownItem `json:"items"`
	Conn   string               `json:"conn"` // the header's "updated ... ago"
}

type shownItem struct {
	Remaining string `json:"remaining"`
	Stocked   string `json:"stocked"`
	SoldOut   bool   `json:"sold_out"` // the SOLD OUT marker is visible
}

// shownJS reads a shownSale from the page; %s is the sale id as a JSON string.
const shownJS = `((id) => {
  const visible = (e) => !!e && e.getClientRects().length > 0;
  const sale = [...document.querySelectorAll('[data-sale]')].find((e) => e.dataset.sale === id);
  const out = { found: visible(sale), status: '', items: {}, conn: document.getElementById('conn').innerText };
  if (!sale) return out;
  out.status = sale.querySelector('.status')?.innerText ?? '';
  for (const row of sale.querySelectorAll('[data-sku]')) {
    out.items[row.dataset.sku] = {
      remaining: row.querySelector('.remaining')?.innerText ?? '',
      stocked: row.querySelector('.stocked')?.innerText ?? '',
      sold_out: [...row.querySelectorAll('*')].some((e) => visible(e) && e.innerText === 'SOLD OUT'),
    };
  }
  return out;
})(%s)`

// waitShown polls the page until the sale it shows satisfies ok, and fails
// the test with what the page shows if it does not within pageWait.
func (b *browser) waitShown(t *testing.T, sale, want string, ok func(shownSale) bool) shownSale {
	t.Helper()
	id, _ := json.Marshal(sale)
	deadline := time.Now().Add(pageWait)
	var last shownSale
	for {
		s, err := chromedp.Run(b.ctx, chromedp.Evaluate[shownSale](fmt.Sprintf(shownJS, id)))
		if err != nil {
			t.Fatalf("read the page: %v", err)
		}
		last = s
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page did not show %s within %v; it shows %+v%s", want, pageWait, last, b.reported())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDashboard opens the live page in headless Chromium: a new sale shows
// with its stock, and buys bring the numbers down, with no reload. With
// SECKILL_UPDATE_SCREENSHOT=1 it writes docs/dashboard.png.
func TestDashboard(t *testing.T) {
	a := liveApp(t)
	b := newBrowser(t)
	origin := a.svc.URL()

	sale := fmt.Sprintf("launch-%04d", rand.IntN(10000))
	a.createSale(sale, 5, "hoodie", 40, "cap", 3, "sticker", -1)
	if err := chromedp.Do(b.ctx, chromedp.Navigate(origin+"/")); err != nil {
		t.Fatalf("open %s/: %v", origin, err)
	}
	s := b.waitShown(t, sale, "the sale active with its full stock", func(s shownSale) bool {
		return s.Found && s.Status == "ACTIVE" && len(s.Items) == 3 &&
			s.Items["hoodie"] == shownItem{Remaining: "40", Stocked: "40"} &&
			s.Items["cap"] == shownItem{Remaining: "3", Stocked: "3"} &&
			s.Items["sticker"] == shownItem{Remaining: "∞", Stocked: "∞"}
	})
	if !strings.HasPrefix(s.Conn, "updated ") {
		t.Errorf("header says %q, want \"updated … ago\"", s.Conn)
	}

	a.buy(sale, "ann", "hoodie", 2, "cap", 2)
	a.buy(sale, "bob", "hoodie", 3, "cap", 1, "sticker", 4)
	a.buy(sale, "cy", "hoodie", 1)
	b.waitShown(t, sale, "hoodie at 34 and cap sold out", func(s shownSale) bool {
		return s.Items["hoodie"] == shownItem{Remaining: "34", Stocked: "40"} &&
			s.Items["cap"] == shownItem{Remaining: "0", Stocked: "3", SoldOut: true} &&
			s.Items["sticker"] == shownItem{Remaining: "∞", Stocked: "∞"}
	})
	b.checkClean(t, origin)

	if os.Getenv(screenshotEnv) == "1" {
		writeScreenshot(t, a, b, sale)
	}
}

// writeScreenshot writes docs/dashboard.png: the sale of TestDashboard
// with orders still coming in, and a paused sale beside it.
func writeScreenshot(t *testing.T, a *app, b *browser, sale string) {
	t.Helper()
	a.createSale("vip-preview", 1, "watch", 12, "ring", 25)
	for i := range 5 {
		a.buy("vip-preview", fmt.Sprintf("vip%d", i), "watch", 1)
	}
	mustStatus(t, a.admin("POST", "/v1/admin/sales/vip-preview/pause", nil), http.StatusOK)
	// Orders arrive for a second, so the rates are not zero.
	for i := range 12 {
		a.buy(sale, fmt.Sprintf("buyer%d", i), "hoodie", 1+i%2, "sticker", 1)
		time.Sleep(80 * time.Millisecond)
	}
	b.waitShown(t, "vip-preview", "the paused sale", func(s shownSale) bool {
		return s.Status == "PAUSED" && s.Items["watch"].Remaining == "7"
	})
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join("..", "..", "docs", "dashboard.png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", path, len(png))
}
