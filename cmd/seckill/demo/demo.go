// Package demo is `seckill demo`: it runs a whole flash sale end to end. It
// starts the service in process, lets simulated buyers at its HTTP API,
// waits until every accepted order is in the database, and checks every
// invariant.
package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/reconcile"
	"github.com/seckill/seckill/internal/service"
)

// Config shapes the simulated sale.
type Config struct {
	Buyers       int   // distinct simulated buyers; default 3000
	Concurrency  int   // buyers buying at once; default 64
	HotStock     int64 // units of the hot item; default 100
	PerUserLimit int64 // default 2
	// PaymentTimeout, whole seconds, adds the payment round (payment.go)
	// after the sale: 0 leaves it out.
	PaymentTimeout time.Duration
	// RoomAdmitTTL, whole seconds from 10, adds the room round (room.go):
	// how long an admission lasts before it lapses; 0 leaves it out.
	RoomAdmitTTL time.Duration
	// Progress, if not nil, receives a progress bar (for a terminal).
	Progress io.Writer
}

func (c *Config) defaults() {
	if c.Buyers <= 0 {
		c.Buyers = 3000
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 64
	}
	if c.HotStock <= 0 {
		c.HotStock = 100
	}
	if c.PerUserLimit <= 0 {
		c.PerUserLimit = 2
	}
}

// Result is what the sale did, counted from the HTTP answers, the service's
// Redis and its database afterwards.
type Result struct {
	Sale                                  string
	Requests, Accepted, Rejected, Replays int
	Errors                                int // any other answer
	FirstError                            string
	Items                                 []ItemResult
	BuyersOverLimit                       int // from the database's orders
	OrdersInDB                            int // confirmed orders of the accepted ones
	Reconcile                             reconcile.Report
	Elapsed, Settle                       time.Duration
	P50, P99                              time.Duration
	Payment                               *PaymentResult // the payment round, if run
	Room                                  *RoomResult    // the room round, if run
}

// ItemResult is one item's outcome.
type ItemResult struct {
	SKU       string
	Stock     int64 // -1 unlimited
	Sold      int64 // from Redis
	Receipts  int64 // units the 201 answers sold
	Remaining int64
}

// Oversold is the units sold beyond stock, over all items.
func (r Result) Oversold() int64 {
	var n int64
	for _, it := range r.Items {
		if it.Stock >= 0 && it.Sold > it.Stock {
			n += it.Sold - it.Stock
		}
	}
	return n
}

// OK reports whether every invariant held.
func (r Result) OK() bool {
	if r.Oversold() != 0 || r.BuyersOverLimit != 0 || r.Errors != 0 || r.OrdersInDB != r.Accepted || !r.Reconcile.Consistent {
		return false
	}
	if r.Payment != nil && !r.Payment.OK() {
		return false
	}
	if r.Room != nil && !r.Room.OK() {
		return false
	}
	for _, it := range r.Items {
		if it.Sold != it.Receipts || (it.Stock >= 0 && it.Remaining+it.Sold != it.Stock) {
			return false
		}
	}
	return true
}

const (
	hotSKU       = "hot"
	unlimitedSKU = "sticker"
)

// Run starts the service with svcCfg (listening on a free loopback port),
// runs the sale, and returns the result. On the Redis and the PostgreSQL
// database svcCfg names it works under a key prefix and in a schema of its
// own (svcCfg's KeyPrefix, DatabaseSchema and the URL's search_path are
// not used), and removes both at its end, failed or not; an SQLite file
// svcCfg names is the caller's, and an embedded Redis goes with the
// service.
func Run(ctx context.Context, svcCfg service.Config, cfg Config) (Result, error) {
	cfg.defaults()
	o, err := takeOwn(&svcCfg)
	if err != nil {
		return Result{}, err
	}
	res, err := run(ctx, svcCfg, cfg)
	if rerr := o.remove(ctx); rerr != nil {
		err = errors.Join(err, fmt.Errorf("remove what the demo made: %w", rerr))
	}
	return res, err
}

// run is Run on the servers svcCfg names; the service is shut down when it
// returns.
func run(ctx context.Context, svcCfg service.Config, cfg Config) (Result, error) {
	svcCfg.Addr = "127.0.0.1:0"
	svcCfg.ReconcileEvery = -1
	svcCfg.Pipeline.Block = 50 * time.Millisecond
	svc, err := service.Start(ctx, svcCfg)
	if err != nil {
		return Result{}, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = svc.Shutdown(sctx)
	}()
	c := &client{base: svc.URL(), admin: svc.AdminToken(), secret: svc.JWTSecret(),
		http: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Concurrency}}}

	res := Result{Sale: "demo-" + strconv.FormatInt(time.Now().UnixMilli(), 36)}
	sale := map[string]any{"id": res.Sale, "per_user_limit": cfg.PerUserLimit, "items": []map[string]any{
		{"sku": hotSKU, "stock": cfg.HotStock}, {"sku": unlimitedSKU, "stock": inventory.Unlimited}}}
	if status, body, err := c.do(ctx, "POST", "/v1/admin/sales", c.admin, sale, nil); err != nil || status != http.StatusCreated {
		return res, fmt.Errorf("create sale: %d %s %v", status, body, err)
	}

	var (
		mu        sync.Mutex
		latencies []time.Duration
		accepted  = map[string]bool{}
		receipts  = map[string]int64{}
		done      atomic.Int64
	)
	record := func(status int, body []byte, took time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		res.Requests++
		latencies = append(latencies, took)
		switch status {
		case http.StatusCreated:
			var o struct {
				OrderID string `json:"order_id"`
				Items   []struct {
					SKU string `json:"sku"`
					Qty int64  `json:"qty"`
				} `json:"items"`
			}
			if json.Unmarshal(body, &o) != nil || accepted[o.OrderID] {
				res.Errors++
				return
			}
			res.Accepted++
			accepted[o.OrderID] = true
			for _, l := range o.Items {
				receipts[l.SKU] += l.Qty
			}
		case http.StatusOK:
			res.Replays++
		case http.StatusConflict:
			res.Rejected++
		default:
			res.Errors++
			if res.FirstError == "" {
				res.FirstError = fmt.Sprintf("%d %s", status, bytes.TrimSpace(body))
			}
		}
	}

	start := time.Now()
	stopBar := progress(cfg.Progress, &done, cfg.Buyers)
	users := make(chan int)
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := range users {
				c.buyer(ctx, res.Sale, "buyer-"+strconv.Itoa(u), record)
				done.Add(1)
			}
		}()
	}
	for u := range cfg.Buyers {
		users <- u
	}
	close(users)
	wg.Wait()
	stopBar()
	res.Elapsed = time.Since(start)

	// Every accepted order must reach the database.
	settle := time.Now()
	db := svc.Store()
	for {
		counts, err := db.CountOrders(ctx, res.Sale)
		if err != nil {
			return res, err
		}
		if counts[inventory.OrderConfirmed] >= res.Accepted || time.Since(settle) > 20*time.Second {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	res.Settle = time.Since(settle)
	for id := range accepted {
		if o, err := db.Order(ctx, id); err == nil && o.Status == inventory.OrderConfirmed {
			res.OrdersInDB++
		}
	}
	if res.BuyersOverLimit, err = overLimit(ctx, svc, res.Sale, cfg.PerUserLimit); err != nil {
		return res, err
	}
	if res.Reconcile, err = reconcile.Sale(ctx, svc.Engine(), svc.Redis(), db, res.Sale); err != nil {
		return res, err
	}
	for _, it := range res.Reconcile.Items {
		res.Items = append(res.Items, ItemResult{SKU: it.SKU, Stock: it.Stocked, Sold: it.Sold,
			Receipts: receipts[it.SKU], Remaining: it.Remaining})
	}
	slices.Sort(latencies)
	if n := len(latencies); n > 0 {
		res.P50, res.P99 = latencies[n/2], latencies[n*99/100]
	}
	if cfg.PaymentTimeout > 0 {
		p, err := paymentRound(ctx, svc, c, cfg)
		res.Payment = &p
		if err != nil {
			return res, fmt.Errorf("payment round: %w", err)
		}
	}
	if cfg.RoomAdmitTTL > 0 {
		r, err := roomRound(ctx, c, cfg)
		res.Room = &r
		if err != nil {
			return res, fmt.Errorf("room round: %w", err)
		}
	}
	return res, nil
}

// overLimit counts the buyers whose confirmed orders hold more than the
// limit of some sku, from the database.
func overLimit(ctx context.Context, svc *service.Service, sale string, limit int64) (int, error) {
	snap, err := svc.Store().Snapshot(ctx, sale)
	if err != nil {
		return 0, err
	}
	held := map[string]int64{}
	over := map[string]bool{}
	for _, o := range snap.Orders {
		if o.Status == inventory.OrderCancelled {
			continue
		}
		for _, l := range o.Items {
			if held[o.UserID+"|"+l.SKU] += l.Qty; held[o.UserID+"|"+l.SKU] > limit {
				over[o.UserID] = true
			}
		}
	}
	return len(over), nil
}

// client talks to the service's API.
type client struct {
	base, admin, secret string
	http                *http.Client
}

func (c *client) do(ctx context.Context, method, path, token string, body any, header map[string]string) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// buyer is one simulated person: a buy of the hot item, sometimes with a
// sticker, sometimes a double click (the same Idempotency-Key twice),
// sometimes greedy (going back for more stickers than the limit allows).
func (c *client) buyer(ctx context.Context, sale, user string, record func(int, []byte, time.Duration)) {
	token, err := service.SignUser(c.secret, user, nil)
	if err != nil {
		record(0, []byte(err.Error()), 0)
		return
	}
	buy := func(items []map[string]any, key string) {
		var header map[string]string
		if key != "" {
			header = map[string]string{"Idempotency-Key": key}
		}
		t := time.Now()
		status, body, err := c.do(ctx, "POST", "/v1/sales/"+sale+"/orders", token, map[string]any{"items": items}, header)
		if err != nil {
			status, body = 0, []byte(err.Error())
		}
		record(status, body, time.Since(t))
	}
	items := []map[string]any{{"sku": hotSKU, "qty": 1 + rand.IntN(2)}}
	if rand.IntN(3) == 0 {
		items = append(items, map[string]any{"sku": unlimitedSKU, "qty": 1})
	}
	key := ""
	if rand.IntN(5) == 0 {
		key = "click-" + user
	}
	buy(items, key)
	if key != "" {
		buy(items, key) // the double click: the same order again, or the same refusal
	}
	if rand.IntN(4) == 0 {
		buy([]map[string]any{{"sku": unlimitedSKU, "qty": 2}}, "") // greedy
	}
}

// progress draws a bar on w until the returned function is called.
func progress(w io.Writer, done *atomic.Int64, total int) func() {
	if w == nil {
		return func() {}
	}
	draw := func() {
		n := int(done.Load())
		const width = 40
		fill := n * width / max(total, 1)
		fmt.Fprintf(w, "\r[%s%s] %d/%d buyers", bytes.Repeat([]byte("#"), fill), bytes.Repeat([]byte("."), width-fill), n, total)
	}
	stop := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			draw()
			select {
			case <-stop:
				draw()
				fmt.Fprintln(w)
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(stop); <-finished }
}

// Print writes the result table.
func Print(w io.Writer, r Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "item\tstock\tsold\t201 receipts\tremaining\t\n")
	for _, it := range r.Items {
		stock, rem := strconv.FormatInt(it.Stock, 10), strconv.FormatInt(it.Remaining, 10)
		if it.Stock < 0 {
			stock, rem = "unlimited", "unlimited"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t\n", it.SKU, stock, it.Sold, it.Receipts, rem)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	consistent := "consistent"
	if !r.Reconcile.Consistent {
		consistent = "DRIFT"
	}
	rows := []struct {
		k string
		v any
	}{
		{"requests", r.Requests},
		{"accepted (201)", r.Accepted},
		{"rejected (409 sold out / over limit)", r.Rejected},
		{"idempotent repeats (200)", r.Replays},
		{"errors", r.Errors},
		{"oversold", r.Oversold()},
		{"buyers over the limit", r.BuyersOverLimit},
		{"orders in the database", fmt.Sprintf("%d of %d accepted (all in %v)", r.OrdersInDB, r.Accepted, r.Settle.Round(time.Millisecond))},
		{"reconcile", consistent},
		{"requests/s", fmt.Sprintf("%.0f", float64(r.Requests)/r.Elapsed.Seconds())},
		{"latency p50 / p99", fmt.Sprintf("%v / %v", r.P50.Round(10*time.Microsecond), r.P99.Round(10*time.Microsecond))},
	}
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t%v\n", row.k, row.v)
	}
	_ = tw.Flush()
	if r.FirstError != "" {
		fmt.Fprintln(w, "first error:", r.FirstError)
	}
	if r.Payment != nil {
		printPayment(w, *r.Payment)
	}
	if r.Room != nil {
		printRoom(w, *r.Room)
	}
	if r.OK() {
		fmt.Fprintln(w, "\nall invariants held: no oversell, nobody over the limit, every accepted order confirmed in the database")
	} else {
		fmt.Fprintln(w, "\nINVARIANT BROKEN: see the table above")
	}
}
