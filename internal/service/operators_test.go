package service_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/waitfor"
)

// What operators see: /metrics, the live view (GET /v1/live) and the list
// of sales (GET /v1/sales).

// scrape reads /metrics: every seckill_* series, "name{labels}" -> value.
func (a *app) scrape() map[string]float64 {
	a.t.Helper()
	r := a.call("GET", "/metrics", "", nil)
	mustStatus(a.t, r, http.StatusOK)
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(r.body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "seckill_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			a.t.Fatalf("metric line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// seriesOf counts the series of the scrape m whose labels name the sale.
func seriesOf(m map[string]float64, sale string) int {
	n := 0
	for k := range m {
		if strings.Contains(k, `sale="`+sale+`"`) {
			n++
		}
	}
	return n
}

// liveSales reads the live view once (GET /v1/live as JSON): its sales by
// id, and the sample's size in bytes.
func (a *app) liveSales() (map[string]map[string]any, int) {
	a.t.Helper()
	r := a.call("GET", "/v1/live", "", nil)
	mustStatus(a.t, r, http.StatusOK)
	var v struct {
		Sales []map[string]any `json:"sales"`
	}
	if err := json.Unmarshal(r.body, &v); err != nil {
		a.t.Fatalf("live view: %v: %.300s", err, r.body)
	}
	out := map[string]map[string]any{}
	for _, s := range v.Sales {
		out[s["id"].(string)] = s
	}
	return out, len(r.body)
}

// waitArchived waits until GET /v1/sales/{sale} reads archived.
func (a *app) waitArchived(sales ...string) {
	a.t.Helper()
	waitfor.Until(a.t, waitfor.Patience, "the sales archived", func() error {
		for _, id := range sales {
			if r := a.call("GET", "/v1/sales/"+id, "", nil); r.status != http.StatusOK || r.json(a.t)["archived"] != true {
				return fmt.Errorf("sale %s: %d %.200s", id, r.status, r.body)
			}
		}
		return nil
	})
}

// TestOrderFiguresOfClosedSegmentedSales: the per-sale order figures are
// four, each right: confirmed (in the database, neither cancelled nor
// expired), paid, awaiting payment and expired; in /metrics and in the live
// view alike, for segmented sales summed over their segments, and they
// stay right once the sales are closed and drained (the archiver is off
// here, so they stay). Before, the expired orders were still counted as
// confirmed and the segments' paid and expired orders were not summed.
func TestOrderFiguresOfClosedSegmentedSales(t *testing.T) {
	cfg := stacks[0].start(t)
	cfg.SampleEvery, cfg.ArchiveEvery, cfg.ExpireEvery = 50*time.Millisecond, -1, 50*time.Millisecond
	a := startApp(t, cfg)
	// fx: six reservations of 2 s, one paid in each segment, four expire.
	// fw: four reservations of 10 min, one paid, three awaiting.
	a.createSegmentedPaySale("fx", 20, 2, 2)
	a.createSegmentedPaySale("fw", 20, 2, 600)
	paidIn := map[string]bool{}
	var expiring []string
	for u := range 6 {
		user := fmt.Sprintf("x%d", u)
		r := a.buyOne("fx", user)
		mustStatus(t, r, http.StatusCreated)
		id := r.json(t)["order_id"].(string)
		seg := id[:strings.IndexByte(id, '.')]
		if paidIn[seg] || len(paidIn) == 2 {
			expiring = append(expiring, id)
			continue
		}
		if r := a.call("POST", "/v1/orders/"+id+"/pay", a.token(user), map[string]any{"payment_ref": "r-" + user}); r.status == http.StatusOK {
			paidIn[seg] = true
		} else {
			expiring = append(expiring, id) // too slow: expired already
		}
	}
	if len(paidIn) != 2 {
		t.Skipf("paid in %d segments of fx, want 2: the machine is too slow for 2 s reservations", len(paidIn))
	}
	for u := range 4 {
		user := fmt.Sprintf("w%d", u)
		r := a.buyOne("fw", user)
		mustStatus(t, r, http.StatusCreated)
		if u == 0 {
			id := r.json(t)["order_id"].(string)
			mustStatus(t, a.call("POST", "/v1/orders/"+id+"/pay", a.token(user), map[string]any{"payment_ref": "r-" + user}), http.StatusOK)
		}
	}
	waitfor.Until(t, waitfor.Patience, "fx's unpaid orders expired", func() error {
		for _, id := range expiring {
			r := a.admin("GET", "/v1/orders/"+id, nil)
			if r.status != http.StatusOK || r.json(t)["payment_status"] != "expired" {
				return fmt.Errorf("order %s: %.200s", id, r.body)
			}
		}
		return nil
	})
	for _, id := range []string{"fx", "fw"} {
		mustStatus(t, a.admin("POST", "/v1/admin/sales/"+id+"/close", nil), http.StatusOK)
	}
	want := map[string]map[string]float64{
		"fx": {"confirmed": 2, "paid": 2, "awaiting_payment": 0, "expired": 4, "pending": 0},
		"fw": {"confirmed": 4, "paid": 1, "awaiting_payment": 3, "expired": 0, "pending": 0},
	}
	check := func() error {
		m := a.scrape()
		live, _ := a.liveSales()
		for sale, figures := range want {
			for fig, v := range figures {
				name := fmt.Sprintf(`seckill_orders_%s{sale=%q}`, fig, sale)
				if got, ok := m[name]; !ok || got != v {
					return fmt.Errorf("%s = %v (present %v), want %v", name, got, ok, v)
				}
				if got, _ := live[sale]["orders_"+fig].(float64); got != v {
					return fmt.Errorf("live view: %s orders_%s = %v, want %v", sale, fig, live[sale]["orders_"+fig], v)
				}
			}
			if live[sale]["status"] != "ended" {
				return fmt.Errorf("live view: %s is %v", sale, live[sale]["status"])
			}
		}
		return nil
	}
	waitfor.Until(t, waitfor.Patience, "the figures right", check)
	// They stay so: the sales left the live set (ended, drained) and
	// their last figures stand.
	for range 5 {
		time.Sleep(200 * time.Millisecond)
		if err := check(); err != nil {
			t.Fatalf("the figures changed: %v", err)
		}
	}
}

// TestArchivedCountsSales: seckill_sales_archived_total counts sales, a
// segmented one once (it counted each of its segments before).
func TestArchivedCountsSales(t *testing.T) {
	cfg := stacks[0].start(t)
	cfg.ArchiveEvery = 20 * time.Millisecond
	a := startApp(t, cfg)
	mustStatus(t, a.createSegmented("ar", 1, "A", int64(30), 3), http.StatusCreated)
	a.createSale("ap", 1, "A", 5)
	for _, id := range []string{"ar", "ap"} {
		mustStatus(t, a.buyOne(id, "u1"), http.StatusCreated)
		mustStatus(t, a.admin("POST", "/v1/admin/sales/"+id+"/close", nil), http.StatusOK)
	}
	a.waitArchived("ar", "ap")
	waitfor.Until(t, waitfor.Patience, "the archived count", func() error {
		if n := a.scrape()["seckill_sales_archived_total"]; n < 2 {
			return fmt.Errorf("seckill_sales_archived_total %v", n)
		}
		return nil
	})
	if n := a.scrape()["seckill_sales_archived_total"]; n != 2 {
		t.Fatalf("seckill_sales_archived_total = %v after archiving a sale of three segments and a plain one, want 2", n)
	}
}

// TestArchivedSalesLeaveMetricsAndLiveView: an archived sale's series leave
// /metrics and the sale leaves the live view (a segmented sale once all of
// its segments are archived); before, every sale ever run kept about 20
// series per two-item sale for good.
func TestArchivedSalesLeaveMetricsAndLiveView(t *testing.T) {
	cfg := stacks[0].start(t)
	cfg.SampleEvery, cfg.ArchiveEvery = 50*time.Millisecond, 20*time.Millisecond
	a := startApp(t, cfg)
	const n = 20
	var ids []string
	for i := range n {
		id := fmt.Sprintf("gone%02d", i)
		a.createSale(id, 1, "A", 5, "B", 5)
		ids = append(ids, id)
	}
	mustStatus(t, a.createSegmented("goneseg", 1, "A", int64(10), 2, "B", int64(10), 0), http.StatusCreated)
	ids = append(ids, "goneseg")
	a.createSale("stays", 1, "A", 5, "B", 5)
	for _, id := range append(ids, "stays") {
		mustStatus(t, a.buyOne(id, "u1"), http.StatusCreated)
	}
	waitfor.Until(t, waitfor.Patience, "every sale in the metrics", func() error {
		m := a.scrape()
		for _, id := range append(ids, "stays") {
			if seriesOf(m, id) == 0 {
				return fmt.Errorf("no series of %s", id)
			}
		}
		return nil
	})
	t.Logf("%d series of sale gone00 while it lives", seriesOf(a.scrape(), "gone00"))
	for _, id := range ids {
		mustStatus(t, a.admin("POST", "/v1/admin/sales/"+id+"/close", nil), http.StatusOK)
	}
	a.waitArchived(ids...)
	waitfor.Until(t, waitfor.Patience, "the archived sales gone from /metrics and the live view", func() error {
		m := a.scrape()
		live, _ := a.liveSales()
		left := 0
		for _, id := range ids {
			left += seriesOf(m, id)
			if _, ok := live[id]; ok {
				return fmt.Errorf("the live view still shows %s", id)
			}
		}
		for k := range m {
			if strings.Contains(k, `sale="goneseg:`) {
				left++
			}
		}
		if left > 0 {
			return fmt.Errorf("%d series of the archived sales left", left)
		}
		return nil
	})
	if m, live := a.scrape(), func() map[string]map[string]any { l, _ := a.liveSales(); return l }(); seriesOf(m, "stays") == 0 || live["stays"] == nil {
		t.Fatalf("the live sale left too: %d series", seriesOf(m, "stays"))
	}
}

// TestWideSaleIsBoundedInMetricsAndLiveView: a sale of 2,500 items adds a
// bounded number of series to /metrics and a bounded live sample to every
// stream (before: 17,506 series and about 400 KB a second per stream); the
// items beyond the bound are summed, so the totals stay whole.
func TestWideSaleIsBoundedInMetricsAndLiveView(t *testing.T) {
	const items, stock = 2500, 3
	cfg := stacks[0].start(t)
	cfg.SampleEvery = 50 * time.Millisecond
	a := startApp(t, cfg)
	var b strings.Builder
	b.WriteString(`{"id":"wide","per_user_limit":1,"items":[`)
	for i := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"sku":"%d","stock":%d}`, i, stock)
	}
	b.WriteString(`]}`)
	mustStatus(t, a.admin("POST", "/v1/admin/sales", b.String()), http.StatusCreated)
	buy := a.call("POST", "/v1/sales/wide/orders", a.token("u1"), map[string]any{"items": []map[string]any{{"sku": "2499", "qty": 1}}})
	mustStatus(t, buy, http.StatusCreated)
	var m map[string]float64
	var live map[string]map[string]any
	var size int
	waitfor.Until(t, waitfor.Patience, "the wide sale sampled with its buy", func() error {
		m = a.scrape()
		live, size = a.liveSales()
		if m[`seckill_orders_confirmed{sale="wide"}`] != 1 || live["wide"] == nil || live["wide"]["orders_confirmed"] != 1.0 {
			return fmt.Errorf("confirmed %v, live %v", m[`seckill_orders_confirmed{sale="wide"}`], live["wide"]["orders_confirmed"])
		}
		return nil
	})
	series := seriesOf(m, "wide")
	t.Logf("a sale of %d items: %d series, a live sample of %d bytes", items, series, size)
	if series > 1000 {
		t.Errorf("a sale of %d items has %d series in /metrics, want at most 1000", items, series)
	}
	if size > 16<<10 {
		t.Errorf("the live sample of a sale of %d items is %d bytes, want at most 16 KiB", items, size)
	}
	// Every unit is still counted: the items shown plus the others'
	// sums make the whole sale, in /metrics and in the live view.
	var stocked, sold float64
	for k, v := range m {
		if strings.HasPrefix(k, `seckill_stock_stocked{sale="wide"`) {
			stocked += v
		}
		if strings.HasPrefix(k, `seckill_stock_sold{sale="wide"`) {
			sold += v
		}
	}
	if stocked != items*stock || sold != 1 {
		t.Errorf("/metrics: stocked %v and sold %v over the wide sale's series, want %d and 1", stocked, sold, items*stock)
	}
	ls := live["wide"]
	shown, _ := ls["items"].([]any)
	other, _ := ls["other_items"].(map[string]any)
	if other == nil || len(shown) == 0 || float64(len(shown))+other["count"].(float64) != items {
		t.Fatalf("live view: %d items shown and others %v, want %d in all", len(shown), other, items)
	}
	stocked, sold = other["stocked"].(float64), other["sold"].(float64)
	hot := false
	for _, it := range shown {
		it := it.(map[string]any)
		stocked += it["stocked"].(float64)
		sold += it["sold"].(float64)
		hot = hot || it["sku"] == "2499"
	}
	if stocked != items*stock || sold != 1 || !hot {
		t.Errorf("live view: stocked %v, sold %v, the item bought shown %v; want %d, 1, true", stocked, sold, hot, items*stock)
	}
}

// TestSalesListLiveByDefaultArchivedPaged: GET /v1/sales lists the sales
// that are not archived; the archived ones are listed with archived=true,
// a page at a time (limit, after): walking the pages gives every archived
// sale exactly once. Before, every sale ever made was built on every call.
func TestSalesListLiveByDefaultArchivedPaged(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		const n = 13
		var archived, live []string
		for i := range n {
			id := fmt.Sprintf("l%02d", i)
			a.createSale(id, 1, "A", 5)
			if i%4 == 3 {
				live = append(live, id)
			} else {
				archived = append(archived, id)
			}
		}
		mustStatus(t, a.createSegmented("lseg", 1, "A", int64(10), 2), http.StatusCreated)
		archived = append(archived, "lseg")
		mustStatus(t, a.createSegmented("lhot", 1, "A", int64(10), 2), http.StatusCreated)
		live = append(live, "lhot")
		for _, id := range archived {
			mustStatus(t, a.buyOne(id, "u1"), http.StatusCreated)
			mustStatus(t, a.admin("POST", "/v1/admin/sales/"+id+"/close", nil), http.StatusOK)
		}
		a.waitArchived(archived...)
		ids := func(r reply) []string {
			t.Helper()
			mustStatus(t, r, http.StatusOK)
			var out []string
			for _, s := range r.json(t)["sales"].([]any) {
				out = append(out, s.(map[string]any)["id"].(string))
			}
			return out
		}
		waitfor.Until(t, waitfor.Patience, "the default list", func() error {
			if got := ids(a.call("GET", "/v1/sales", "", nil)); strings.Join(got, ",") != strings.Join(live, ",") {
				return fmt.Errorf("GET /v1/sales lists %v, want the live sales %v", got, live)
			}
			return nil
		})
		seen := map[string]int{}
		after := ""
		for pages := 0; ; pages++ {
			if pages > n {
				t.Fatalf("more than %d pages", n)
			}
			q := "/v1/sales?archived=true&limit=4"
			if after != "" {
				q += "&after=" + after
			}
			r := a.call("GET", q, "", nil)
			page := ids(r)
			if len(page) > 4 {
				t.Fatalf("%s: %d sales, want at most 4", q, len(page))
			}
			for _, s := range r.json(t)["sales"].([]any) {
				s := s.(map[string]any)
				seen[s["id"].(string)]++
				if s["archived"] != true || s["status"] != "ended" {
					t.Errorf("%s lists %v", q, s)
				}
			}
			next, _ := r.json(t)["next"].(string)
			if next == "" {
				break
			}
			if len(page) == 0 || next != page[len(page)-1] {
				t.Fatalf("%s: next %q after %v", q, next, page)
			}
			after = next
		}
		if len(seen) != len(archived) {
			t.Errorf("the pages list %v, want each of %v once", seen, archived)
		}
		for _, id := range archived {
			if seen[id] != 1 {
				t.Errorf("archived sale %s listed %d times", id, seen[id])
			}
		}
		for _, q := range []string{"?archived=maybe", "?archived=true&limit=0", "?archived=true&limit=100000", "?archived=true&after=%20x", "?limit=3"} {
			if r := a.call("GET", "/v1/sales"+q, "", nil); r.status != http.StatusBadRequest || r.code(t) != "invalid_argument" {
				t.Errorf("GET /v1/sales%s: %d %s, want 400 invalid_argument", q, r.status, r.body)
			}
		}
	})
}

// TestSalesListIsBuiltOncePerPeriod: a crowd asking GET /v1/sales at once
// costs one build of the list per salesListTTL (a second), not one per
// request: the Redis commands that read a sale's keys are counted. An
// operator's change on this instance shows at once all the same.
func TestSalesListIsBuiltOncePerPeriod(t *testing.T) {
	cfg := stacks[0].start(t)
	cfg.SampleEvery, cfg.ArchiveEvery = -1, -1
	a := startApp(t, cfg)
	for i := range 40 {
		a.createSale(fmt.Sprintf("c%02d", i), 1, "A", 5)
	}
	w := &keyWatch{counts: map[string]int{}}
	a.svc.Redis().AddHook(w)
	watched := a.svc.Engine().Key("c07", "")
	reads := func() int {
		w.mu.Lock()
		defer w.mu.Unlock()
		n := w.counts[watched]
		w.counts = map[string]int{watched: 0}
		return n
	}
	reads()
	time.Sleep(1100 * time.Millisecond) // past the list built by the last create
	mustStatus(t, a.call("GET", "/v1/sales", "", nil), http.StatusOK)
	one := reads()
	if one == 0 {
		t.Fatal("a build of the list sent no command naming sale c07's keys")
	}
	const clients, each = 8, 4
	began := time.Now()
	errs := make(chan error, clients)
	for range clients {
		go func() {
			for range each {
				resp, err := http.Get(a.svc.URL() + "/v1/sales")
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range clients {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(began)
	builds := float64(reads()) / float64(one)
	t.Logf("%d requests over %v: %.1f builds of the list", clients*each, took, builds)
	if most := 2 + took.Seconds(); builds > most {
		t.Errorf("%d requests over %v built the list %.1f times, want at most %.0f (one a second)", clients*each, took, builds, most)
	}
	a.createSale("cnew", 1, "A", 5)
	found := false
	for _, s := range a.call("GET", "/v1/sales", "", nil).json(t)["sales"].([]any) {
		found = found || s.(map[string]any)["id"] == "cnew"
	}
	if !found {
		t.Error("a sale just made by this instance is not in its list")
	}
}

// TestPartlyArchivedSegmentedSaleLeavesALaterInstance: an instance started
// after one segment of a sale was archived never samples that segment; once
// the other is archived too, the sale still leaves its live view and
// /metrics (its sampler asks the database about the segment it never saw).
// Only the later instance expires reservations, and only once it shows the
// sale: the one reservation left, in the other segment, holds that segment
// out of the archive until then. (Its payment timeout, a second, has
// passed by then: when the later instance expired it at once, the segment
// could be archived before that instance's sampler ever read it, and the
// sale never showed there.)
func TestPartlyArchivedSegmentedSaleLeavesALaterInstance(t *testing.T) {
	cfg := stacks[0].start(t)
	cfg.SampleEvery, cfg.ArchiveEvery, cfg.ExpireEvery = 50*time.Millisecond, 20*time.Millisecond, -1
	a := startApp(t, cfg)
	a.createSegmentedPaySale("pa", 10, 2, 1)
	var kept string // the one reservation, in segment pa:1
	for u := 0; kept == ""; u++ {
		if u == 50 {
			t.Fatal("no buyer's home is segment pa:1")
		}
		user := fmt.Sprintf("u%d", u)
		r := a.buyOne("pa", user)
		mustStatus(t, r, http.StatusCreated)
		id := r.json(t)["order_id"].(string)
		if strings.HasPrefix(id, "pa:1.") {
			kept = id
			break
		}
		mustStatus(t, a.call("POST", "/v1/orders/"+id+"/cancel", a.token(user), nil), http.StatusOK)
	}
	mustStatus(t, a.admin("POST", "/v1/admin/sales/pa/close", nil), http.StatusOK)
	waitfor.Until(t, waitfor.Patience, "segment pa:0 archived", func() error {
		st, err := a.svc.Store().Archive(a.ctx, "pa:0")
		if err != nil || st.ArchivedAt.IsZero() {
			return fmt.Errorf("pa:0 %+v (%v)", st, err)
		}
		return nil
	})
	if st, err := a.svc.Store().Archive(a.ctx, "pa:1"); err != nil || st.Archiving() {
		t.Fatalf("pa:1, a reservation awaiting payment, archived: %+v, %v", st, err)
	}
	// b never sees pa:0 live. Its consumer looks at the ended pa:1 again
	// every IdleSweep, so that b's sampler, however slow, reads it live.
	cfg.Pipeline.IdleSweep = 100 * time.Millisecond
	b := startApp(t, cfg)
	waitfor.Until(t, waitfor.Patience, "the sale in b's live view", func() error {
		if live, _ := b.liveSales(); live["pa"] == nil {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	// Now b expires the reservation (a never does), and pa:1 may go.
	expiring, stopExpiry := context.WithCancel(context.Background())
	expiryDone := make(chan struct{})
	go func() { defer close(expiryDone); b.svc.RunExpiry(expiring, 50*time.Millisecond) }()
	t.Cleanup(func() { stopExpiry(); <-expiryDone }) // before b shuts down

	a.waitArchived("pa") // the reservation expired, pa:1 archived
	if r := a.admin("GET", "/v1/orders/"+kept, nil); r.json(t)["payment_status"] != "expired" {
		t.Fatalf("the reservation: %s", r.body)
	}
	waitfor.Until(t, waitfor.Patience, "the sale gone from b's live view and metrics", func() error {
		m := b.scrape()
		live, _ := b.liveSales()
		if n := seriesOf(m, "pa") + seriesOf(m, "pa:0") + seriesOf(m, "pa:1"); n > 0 || live["pa"] != nil {
			return fmt.Errorf("%d series left, in the live view: %v", n, live["pa"] != nil)
		}
		return nil
	})
}
