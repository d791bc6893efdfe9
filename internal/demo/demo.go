// Package demo runs a whole flash sale against the inventory engine with
// simulated buyers and checks every invariant on the result.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/inventory"
)

// Config shapes the simulated sale.
type Config struct {
	Buyers       int   // distinct simulated buyers; default 3000
	Concurrency  int   // buyers buying at once; default 64
	HotStock     int64 // units of the hot item; default 100
	PerUserLimit int64 // default 2
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

// Result is what the sale did, counted from the buyers' receipts and from
// Redis afterwards.
type Result struct {
	Requests, Accepted, Rejected, Replays int
	Items                                 []ItemResult
	BuyersOverLimit                       int
	EventsBought                          int
	Errors                                int
	Elapsed                               time.Duration
	P50, P99                              time.Duration
}

// ItemResult is one item's outcome.
type ItemResult struct {
	SKU       string
	Stock     int64 // -1 unlimited
	Sold      int64 // from Redis
	Receipts  int64 // units the buyers were told they bought
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
	if r.Oversold() != 0 || r.BuyersOverLimit != 0 || r.Errors != 0 || r.EventsBought != r.Accepted {
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

// Run creates a sale named saleID in rdb under the key prefix, lets
// cfg.Buyers simulated buyers at it, and returns what happened.
func Run(ctx context.Context, rdb redis.UniversalClient, prefix, saleID string, cfg Config) (Result, error) {
	cfg.defaults()
	eng := inventory.New(rdb, inventory.Options{Prefix: prefix})
	err := eng.CreateSale(ctx, inventory.Sale{ID: saleID, PerUserLimit: cfg.PerUserLimit, Items: []inventory.Item{
		{SKU: hotSKU, Stock: cfg.HotStock}, {SKU: unlimitedSKU, Stock: inventory.Unlimited},
	}})
	if err != nil {
		return Result{}, fmt.Errorf("create sale: %w", err)
	}

	var (
		mu        sync.Mutex
		res       Result
		latencies []time.Duration
		perBuyer  = map[string]map[string]int64{}
		receipts  = map[string]int64{}
	)
	record := func(user string, rc inventory.Receipt, err error, took time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		res.Requests++
		latencies = append(latencies, took)
		switch {
		case err == nil && rc.Replayed:
			res.Replays++
		case err == nil:
			res.Accepted++
			if perBuyer[user] == nil {
				perBuyer[user] = map[string]int64{}
			}
			for _, l := range rc.Order.Items {
				perBuyer[user][l.SKU] += l.Qty
				receipts[l.SKU] += l.Qty
			}
		case errors.Is(err, inventory.ErrSoldOut), errors.Is(err, inventory.ErrLimitExceeded):
			res.Rejected++
		default:
			res.Errors++
		}
	}

	start := time.Now()
	users := make(chan int)
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := range users {
				buyer(ctx, eng, saleID, "buyer-"+strconv.Itoa(u), record)
			}
		}()
	}
	for u := range cfg.Buyers {
		users <- u
	}
	close(users)
	wg.Wait()
	res.Elapsed = time.Since(start)

	st, err := eng.Stock(ctx, saleID)
	if err != nil {
		return res, fmt.Errorf("read stock: %w", err)
	}
	for _, it := range st.Items {
		res.Items = append(res.Items, ItemResult{SKU: it.SKU, Stock: it.Stocked, Sold: it.Sold,
			Receipts: receipts[it.SKU], Remaining: it.Remaining})
	}
	for _, held := range perBuyer {
		for _, n := range held {
			if n > cfg.PerUserLimit {
				res.BuyersOverLimit++
				break
			}
		}
	}
	events, err := rdb.XRange(ctx, eng.EventsKey(saleID), "-", "+").Result()
	if err != nil {
		return res, fmt.Errorf("read events: %w", err)
	}
	for _, m := range events {
		if ev, err := inventory.ParseEvent(saleID, m); err == nil && ev.Type == inventory.EventBought {
			res.EventsBought++
		}
	}
	slices.Sort(latencies)
	if n := len(latencies); n > 0 {
		res.P50, res.P99 = latencies[n/2], latencies[n*99/100]
	}
	return res, nil
}

// buyer is one simulated person: a buy of the hot item, sometimes with a
// sticker, sometimes a double click (the same idempotency key twice),
// sometimes greedy (going back for more than the limit allows).
func buyer(ctx context.Context, eng *inventory.Engine, saleID, user string, record func(string, inventory.Receipt, error, time.Duration)) {
	buy := func(lines []inventory.Line, key string) {
		t := time.Now()
		rc, err := eng.Buy(ctx, saleID, user, lines, key)
		record(user, rc, err, time.Since(t))
	}
	lines := []inventory.Line{{SKU: hotSKU, Qty: 1 + rand.Int64N(2)}}
	if rand.IntN(3) == 0 {
		lines = append(lines, inventory.Line{SKU: unlimitedSKU, Qty: 1})
	}
	key := ""
	if rand.IntN(5) == 0 {
		key = "click-" + user
	}
	buy(lines, key)
	if key != "" {
		buy(lines, key) // the double click: must return the same order
	}
	if rand.IntN(4) == 0 {
		buy([]inventory.Line{{SKU: unlimitedSKU, Qty: 2}}, "") // greedy: goes over the limit with the first sticker
	}
}

// Print writes the result table.
func Print(w io.Writer, r Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "item\tstock\tsold\treceipts\tremaining\t\n")
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
	rows := []struct {
		k string
		v any
	}{
		{"requests", r.Requests},
		{"accepted", r.Accepted},
		{"rejected (sold out / over limit)", r.Rejected},
		{"idempotent repeats", r.Replays},
		{"errors", r.Errors},
		{"oversold", r.Oversold()},
		{"buyers over the limit", r.BuyersOverLimit},
		{"order events in the stream", fmt.Sprintf("%d (accepted %d)", r.EventsBought, r.Accepted)},
		{"requests/s", fmt.Sprintf("%.0f", float64(r.Requests)/r.Elapsed.Seconds())},
		{"latency p50 / p99", fmt.Sprintf("%v / %v", r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond))},
	}
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t%v\n", row.k, row.v)
	}
	_ = tw.Flush()
	if r.OK() {
		fmt.Fprintln(w, "\nall invariants held: no oversell, nobody over the limit, one order event per accepted buy")
	} else {
		fmt.Fprintln(w, "\nINVARIANT BROKEN: see the table above")
	}
}
