package bench

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
)

// The engine's approaches buy through inventory.Engine exactly as the
// service does: one sale with one item, a per-user limit of 1, every buy
// by a distinct buyer. What was sold is counted from the sale's order
// stream (one "bought" event per order, written by the same script as the
// deduction), what is left from Engine.Stock.

const (
	engineSale = "hot"
	engineSKU  = "item"
)

type engineItem struct {
	eng     *inventory.Engine
	rdb     *redis.Client
	batched bool
	line    []inventory.Line
}

// prepareEngine's approach buys through an engine with opts (its Prefix is
// set per item), with Buy, or with BuyMany when batched.
func prepareEngine(opts inventory.Options, batched bool) func(ctx context.Context, s *Stores, cfg Config, stock int64) (hotItem, error) {
	evalEveryCall := opts.EvalEveryCall
	return func(ctx context.Context, s *Stores, _ Config, stock int64) (hotItem, error) {
		opts.Prefix = s.newItemTag()
		eng := inventory.New(s.Redis, opts)
		it := &engineItem{eng: eng, rdb: s.Redis, batched: batched, line: []inventory.Line{{SKU: engineSKU, Qty: 1}}}
		if err := eng.CreateSale(ctx, inventory.Sale{ID: engineSale, PerUserLimit: 1,
			Items: []inventory.Item{{SKU: engineSKU, Stock: stock}}}); err != nil {
			return nil, err
		}
		if !evalEveryCall {
			if err := eng.Preload(ctx); err != nil {
				_ = it.drop(context.WithoutCancel(ctx))
				return nil, err
			}
		}
		return it, nil
	}
}

func (it *engineItem) buy(ctx context.Context, buyers []string, out []outcome) {
	if !it.batched {
		for i, b := range buyers {
			_, err := it.eng.Buy(ctx, engineSale, b, it.line, "")
			out[i] = buyOutcome(err)
		}
		return
	}
	reqs := make([]inventory.BuyRequest, len(buyers))
	for i, b := range buyers {
		reqs[i] = inventory.BuyRequest{SaleID: engineSale, UserID: b, Lines: it.line}
	}
	for i, r := range it.eng.BuyMany(ctx, reqs) {
		out[i] = buyOutcome(r.Err)
	}
}

func buyOutcome(err error) outcome {
	switch {
	case err == nil:
		return outcome{sold: true}
	case errors.Is(err, inventory.ErrSoldOut):
		return outcome{soldOut: true}
	}
	return outcome{err: err}
}

func (it *engineItem) count(ctx context.Context) (tally, error) {
	st, err := it.eng.Stock(ctx, engineSale)
	if err != nil {
		return tally{}, err
	}
	if len(st.Items) != 1 {
		return tally{}, fmt.Errorf("sale has %d items, want 1", len(st.Items))
	}
	// The stream holds the "created" event and the orders' "bought" events
	// (nothing trims it: no order consumer runs here).
	sold, err := boughtEvents(ctx, it.rdb, engineSale, it.eng.EventsKey(engineSale))
	if err != nil {
		return tally{}, err
	}
	return tally{sold: sold, remaining: st.Items[0].Remaining}, nil
}

func (it *engineItem) drop(ctx context.Context) error {
	var keys []string
	for _, name := range []string{"sale", "bought", "orders", "idem", "events", "initlock"} {
		keys = append(keys, it.eng.Key(engineSale, name))
	}
	return it.rdb.Unlink(ctx, keys...).Err()
}
