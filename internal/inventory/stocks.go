package inventory

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Stocks reads several sales as Stock does, in one pipeline (one round trip
// per node): states[i] and errs[i] are sale saleIDs[i]'s. A sale missing
// from Redis is rebuilt, as Stock does, on its own.
func (e *Engine) Stocks(ctx context.Context, saleIDs []string) (states []SaleState, errs []error) {
	states, errs = make([]SaleState, len(saleIDs)), make([]error, len(saleIDs))
	p := e.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(saleIDs))
	for i, id := range saleIDs {
		if errs[i] = validateID("sale", id); errs[i] == nil {
			cmds[i] = p.HGetAll(ctx, e.keys(id).sale)
		}
	}
	_, _ = p.Exec(ctx) // each command carries its own error
	for i, id := range saleIDs {
		if cmds[i] == nil {
			continue
		}
		h, err := cmds[i].Result()
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("seckill: read sale %s: %w", id, err)
		case len(h) == 0:
			states[i], errs[i] = e.Stock(ctx, id)
		default:
			states[i], errs[i] = e.decodeSale(id, h)
		}
	}
	return states, errs
}

// OrderCounts reads how many orders each sale's Redis record holds (every
// order Redis still keeps, cancelled ones included), in one pipeline (one
// round trip per node): counts[i] and errs[i] are sale saleIDs[i]'s. The
// sale hash counts them ("orders": buy.lua adds a call's, a rebuild sets
// it); a sale stored before it did holds a field per order, and HLEN
// counts those.
func (e *Engine) OrderCounts(ctx context.Context, saleIDs []string) (counts []int64, errs []error) {
	counts, errs = make([]int64, len(saleIDs)), make([]error, len(saleIDs))
	p := e.rdb.Pipeline()
	kept := make([]*redis.StringCmd, len(saleIDs))
	fields := make([]*redis.IntCmd, len(saleIDs))
	for i, id := range saleIDs {
		if errs[i] = validateID("sale", id); errs[i] == nil {
			k := e.keys(id)
			kept[i], fields[i] = p.HGet(ctx, k.sale, "orders"), p.HLen(ctx, k.orders)
		}
	}
	_, _ = p.Exec(ctx) // each command carries its own error
	for i, id := range saleIDs {
		if kept[i] == nil {
			continue
		}
		switch n, err := kept[i].Result(); {
		case err == redis.Nil:
			counts[i], errs[i] = fields[i].Result()
		case err != nil:
			errs[i] = err
		default:
			if counts[i], err = strconv.ParseInt(n, 10, 64); err != nil || counts[i] < 0 {
				counts[i], errs[i] = 0, fmt.Errorf("%w: sale %s counts %q orders", ErrCorrupt, id, truncate(n, 200))
			}
		}
	}
	return counts, errs
}

// Stock returns a sale's definition, status and every item's counters.
func (e *Engine) Stock(ctx context.Context, saleID string) (SaleState, error) {
	if err := validateID("sale", saleID); err != nil {
		return SaleState{}, err
	}
	key := e.keys(saleID).sale
	for attempt := 0; ; attempt++ {
		h, err := e.rdb.HGetAll(ctx, key).Result()
		if err != nil {
			return SaleState{}, fmt.Errorf("seckill: read sale %s: %w", saleID, err)
		}
		if len(h) > 0 {
			return e.decodeSale(saleID, h)
		}
		if attempt == missingRetries {
			return SaleState{}, fmt.Errorf("%w: sale %s vanished again after a rebuild", ErrUnavailable, saleID)
		}
		if err := e.rebuild(ctx, saleID); err != nil {
			return SaleState{}, err
		}
	}
}

func (e *Engine) decodeSale(saleID string, h map[string]string) (SaleState, error) {
	bad := func(field string) (SaleState, error) {
		return SaleState{}, fmt.Errorf("%w: sale %s field %q", ErrCorrupt, saleID, field)
	}
	num := func(field string) (int64, bool) {
		n, err := strconv.ParseInt(h[field], 10, 64)
		return n, err == nil
	}
	limit, ok1 := num("limit")
	start, ok2 := num("start")
	end, ok3 := num("end")
	if !ok1 || !ok2 || !ok3 {
		return bad("limit/start/end")
	}
	defined, err := parseLines(h["items"], true)
	if err != nil {
		return bad("items")
	}
	st := SaleState{Sale: Sale{
		ID: saleID, PerUserLimit: limit, Paused: h["paused"] == "1",
		StartsAt: fromUnixMs(start), EndsAt: fromUnixMs(end),
	}}
	if pay, ok := num("pay"); ok {
		st.Sale.PaymentTimeout = time.Duration(pay) * time.Millisecond
	} else if h["pay"] != "" {
		return bad("pay")
	}
	st.Status = StatusAt(st.Sale.Paused, st.Sale.StartsAt, st.Sale.EndsAt, e.clock.Now())
	for _, d := range defined {
		it := ItemState{SKU: d.SKU}
		var ok bool
		if it.Remaining, ok = num("r:" + d.SKU); !ok {
			return bad("r:" + d.SKU)
		}
		if it.Stocked, ok = num("t:" + d.SKU); !ok {
			return bad("t:" + d.SKU)
		}
		if it.Stocked == Unlimited {
			if it.Sold, ok = num("s:" + d.SKU); !ok {
				return bad("s:" + d.SKU)
			}
		} else {
			it.Sold = it.Stocked - it.Remaining
		}
		it.Awaiting = awaitingUnits(h, d.SKU)
		st.Items = append(st.Items, it)
		st.Sale.Items = append(st.Sale.Items, Item{SKU: d.SKU, Stock: it.Stocked})
	}
	for f, rec := range h {
		if id, ok := strings.CutPrefix(f, movePrefix); ok {
			m, err := decodeMove(id, rec)
			if err != nil {
				return bad(f)
			}
			st.Moves = append(st.Moves, m)
		}
	}
	slices.SortFunc(st.Moves, func(a, b Move) int { return strings.Compare(a.ID, b.ID) }) // in a stable order
	return st, nil
}
