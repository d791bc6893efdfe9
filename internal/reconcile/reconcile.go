// Package reconcile compares what Redis, the order stream and the database
// say about a sale, item by item, and repairs Redis from the database (the
// system of record) when they drift apart.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/pipeline"
	"github.com/seckill/seckill/internal/store"
)

// Item is one item's comparison. For a limited item the books balance when
// Remaining + Sold == Stocked (Redis's stock counter agrees with its order
// records), OrdersInDB + InFlight == Sold (the database plus the queue hold
// every unit Redis sold) and StockedInDB + StockedInFlight == Stocked (the
// database plus the queue hold every unit Redis stocked). Unlimited items
// have Stocked and Remaining -1 and only the second equation. Every figure
// is as of one position of the sale's stream (see Sale).
type Item struct {
	SKU       string `json:"sku"`
	Stocked   int64  `json:"stocked"`   // initial + restocked, from Redis
	Remaining int64  `json:"remaining"` // from Redis
	Sold      int64  `json:"sold"`      // units in live orders, from Redis's order records
	// OrdersInDB is the units in confirmed, not cancelled orders in the database.
	OrdersInDB int64 `json:"orders_in_db"`
	// InFlight is the units of orders in the stream not yet in the database
	// (bought minus cancelled).
	InFlight int64 `json:"in_flight"`
	// Drift is OrdersInDB + InFlight - Sold: positive, the database holds
	// units Redis does not count as sold; negative, Redis sold units no
	// order will ever reach the database for (lost orders).
	Drift int64 `json:"drift"`
	// StockDrift is Remaining + Sold - Stocked for limited items: units
	// the stock counter holds beyond (positive) or short of (negative) what
	// the orders leave.
	StockDrift int64 `json:"stock_drift"`
	// StockedInDB is initial + restocked as the database has applied it.
	StockedInDB int64 `json:"stocked_in_db"`
	// StockedInFlight is the units of restock and move events in the
	// stream not yet in the database (moves out count negative).
	StockedInFlight int64 `json:"stocked_in_flight"`
	// StockedDrift is Stocked - StockedInDB - StockedInFlight for limited
	// items: positive, Redis counts units stocked that the database will
	// never hear of (a lost restock event, counters raised by hand);
	// negative, Redis lost stock the database has.
	StockedDrift int64 `json:"stocked_drift"`
	// Held is the units Redis's per-user counts hold (what the per-user
	// limit is checked against); HeldDrift is Held - Sold: positive, buyers
	// are counted for units no live order holds; negative, some buyers'
	// counts were lost and they could buy past the limit.
	Held      int64 `json:"held"`
	HeldDrift int64 `json:"held_drift"`
	// Moving is, for a segmented sale (Combine), the units on their way
	// from one segment to another: in no segment, counted in Stocked (and
	// in StockedInFlight) but not in Remaining, so StockDrift is -Moving
	// and the sale is not consistent until the move is finished. 0 for one
	// sale.
	Moving int64 `json:"moving"`
}

// Report is one reconciliation pass over a sale. Consistent is the
// contract's: every item's Drift and StockDrift are 0; and its StockedDrift,
// so that counters changed together (remaining and stocked by the same
// amount) do not pass for consistent.
type Report struct {
	Sale       string `json:"sale"`
	Consistent bool   `json:"consistent"`
	Items      []Item `json:"items"`
	// Moves are the sale's records of moves (inventory.SaleState.Moves),
	// read with its counters: Combine counts the units moving between
	// segments from them, and a pending move out says there is a move to
	// finish (inventory.PendingOut).
	Moves []inventory.Move `json:"-"`
}

// Drifted reports whether the pass found anything to repair: it is not
// Consistent, or some item's HeldDrift is not 0.
func (r Report) Drifted() bool {
	if !r.Consistent {
		return true
	}
	for _, it := range r.Items {
		if it.HeldDrift != 0 {
			return true
		}
	}
	return false
}

// Sale compares the sale's Redis counters, its stream backlog and its
// database rows. The stock figures are exact even while buys, cancels and
// restocks run:
//
//   - Redis's sale hash (stocked, remaining) and the stream's events not yet
//     applied are read in one transaction (inventory.Engine.CountWith,
//     pipeline.QueueInFlight): of one instant, when the stream stood at
//     some position P. Every script that changes a sale appends to its
//     stream in the same script, so those numbers are those of the events
//     up to P. (The order records and per-user counts behind Sold and Held
//     are scanned just after, a page at a time, so that a big sale does not
//     hold Redis: under load they may count a buy or cancel after P, which
//     Drift and HeldDrift show for a pass; at quiescence they are exact.)
//   - The database is read after, in one transaction with the journal rows
//     of the events it applied meanwhile (store.TotalsWith): an event in
//     flight at P that the consumer applied since (or had applied and not
//     yet acknowledged) is counted in the database, not in flight; an event
//     after P that it applied since is taken out of the database's numbers,
//     as Redis's do not count it yet — but only one the stream has
//     generated by the end of the read (its last generated id, read after
//     the database). An event the database holds that the stream never
//     generated was lost by Redis (a restart that lost the AOF's tail, a
//     failover): that is drift, and shows.
//
// So each event up to P is counted once, in flight or in the database, and
// none after P: the stocked figures do not drift for numbers in motion.
// What is left is the journal's reach: an event after P is found by its
// id's text (see store.TotalsWith).
func Sale(ctx context.Context, eng *inventory.Engine, rdb redis.UniversalClient, db *store.Store, saleID string) (Report, error) {
	var stream func() (pipeline.Stream, error)
	counted, err := eng.CountWith(ctx, saleID, func(p redis.Pipeliner) {
		stream = pipeline.QueueInFlight(ctx, p, eng, saleID)
	})
	if err != nil {
		return Report{}, err
	}
	st, sold, held := counted.State, counted.Sold, counted.Held
	at, err := stream()
	if err != nil {
		return Report{}, fmt.Errorf("reconcile %s: %w", saleID, err)
	}
	ids := make([]string, len(at.InFlight))
	inflight := make(map[string]bool, len(at.InFlight))
	for i, ev := range at.InFlight {
		ids[i], inflight[ev.ID] = ev.ID, true
	}
	from := ""
	if ms, _, ok := strings.Cut(at.Position, "-"); ok {
		from = ms + "-" // every id of P's millisecond or later
	}
	totals, journaled, err := db.TotalsWith(ctx, saleID, ids, from)
	if err != nil {
		return Report{}, fmt.Errorf("reconcile %s: %w", saleID, err)
	}
	// The events after P that this stream has generated by now, read after
	// the database: only those are taken out of the database's numbers. An
	// event the database holds beyond what the stream ever generated was
	// lost by Redis (a restart that lost its tail, a failover): it is drift,
	// and must show.
	upTo := at.Position
	if from != "" {
		info, err := rdb.XInfoStream(ctx, eng.EventsKey(saleID)).Result()
		if err != nil && !errors.Is(err, redis.Nil) && !strings.Contains(err.Error(), "no such key") {
			return Report{}, fmt.Errorf("reconcile %s: %w", saleID, err)
		}
		if err == nil {
			upTo = info.LastGeneratedID
		}
	}
	applied := map[string]bool{}           // events in flight at P, in the database now
	since := map[string]store.ItemTotals{} // per sku, what events after P (up to upTo) added to the database
	seen := map[[2]string]bool{}
	for _, j := range journaled {
		if seen[[2]string{j.EventID, j.SKU}] {
			continue // found by both of its ids and from
		}
		seen[[2]string{j.EventID, j.SKU}] = true
		switch {
		case inflight[j.EventID]:
			applied[j.EventID] = true
		case inventory.CompareEventIDs(j.EventID, at.Position) > 0 && inventory.CompareEventIDs(j.EventID, upTo) <= 0:
			t := since[j.SKU]
			switch j.Type {
			case inventory.EventBought:
				t.Sold += j.Qty
			case inventory.EventCancelled, inventory.EventExpired:
				t.Sold -= j.Qty
			case inventory.EventRestocked, inventory.EventMoved:
				t.Stocked += j.Qty
			}
			since[j.SKU] = t
		}
	}
	moving, stocking := map[string]int64{}, map[string]int64{}
	for _, ev := range at.InFlight {
		if applied[ev.ID] {
			continue
		}
		sign := int64(0)
		switch ev.Type {
		case inventory.EventBought:
			sign = 1
		case inventory.EventCancelled, inventory.EventExpired:
			sign = -1
		case inventory.EventRestocked, inventory.EventMoved: // Qty < 0: moved out
			stocking[ev.SKU] += ev.Qty
		}
		for _, l := range ev.Order.Items {
			moving[l.SKU] += sign * l.Qty
		}
	}
	inDB := map[string]store.ItemTotals{}
	for _, t := range totals {
		t.Sold -= since[t.SKU].Sold
		if t.Stocked != inventory.Unlimited {
			t.Stocked -= since[t.SKU].Stocked
		}
		inDB[t.SKU] = t
	}
	r := Report{Sale: saleID, Consistent: true, Moves: st.Moves}
	for _, it := range st.Items {
		item := Item{
			SKU: it.SKU, Stocked: it.Stocked, Remaining: it.Remaining, Sold: sold[it.SKU],
			OrdersInDB: inDB[it.SKU].Sold, InFlight: moving[it.SKU], StockedInDB: inDB[it.SKU].Stocked,
			StockedInFlight: stocking[it.SKU], Held: held[it.SKU],
		}
		item.Drift = item.OrdersInDB + item.InFlight - item.Sold
		item.HeldDrift = item.Held - item.Sold
		if it.Stocked != inventory.Unlimited {
			item.StockDrift = item.Remaining + item.Sold - item.Stocked
			item.StockedDrift = item.Stocked - item.StockedInDB - item.StockedInFlight
		}
		if item.Drift != 0 || item.StockDrift != 0 || item.StockedDrift != 0 {
			r.Consistent = false
		}
		r.Items = append(r.Items, item)
	}
	return r, nil
}

// Print writes a report as a table.
func Print(w io.Writer, r Report) {
	fmt.Fprintf(w, "sale %s: ", r.Sale)
	if r.Drifted() {
		fmt.Fprintln(w, "DRIFT")
	} else {
		fmt.Fprintln(w, "consistent")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "sku\tstocked\tremaining\tsold\torders_in_db\tin_flight\tdrift\tstock_drift\tstocked_drift\theld_drift\t")
	for _, it := range r.Items {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", it.SKU, it.Stocked, it.Remaining, it.Sold,
			it.OrdersInDB, it.InFlight, it.Drift, it.StockDrift, it.StockedDrift, it.HeldDrift)
	}
	_ = tw.Flush()
	for _, it := range r.Items {
		if it.Moving != 0 {
			fmt.Fprintf(w, "%d units of %s are on their way between segments: in none of them (stock_drift) until the move is finished\n", it.Moving, it.SKU)
		}
	}
}
