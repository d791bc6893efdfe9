package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
)

// moveSeq numbers the move ids of hand-built moved events.
var moveSeq atomic.Int64

// moved returns a moved event of the sale as the engine writes it to the
// sale's stream (move.lua), decoded the way the consumer decodes it: qty
// units of sku (negative: out of the sale) to or from peer.
func (e *events) moved(t *testing.T, sku string, qty int64, peer string) inventory.Event {
	t.Helper()
	id := e.next(inventory.EventMoved)
	msg := redis.XMessage{ID: id.ID, Values: map[string]any{
		"type": "moved", "sku": sku, "qty": strconv.FormatInt(qty, 10),
		"move": fmt.Sprintf("mv-%026d", moveSeq.Add(1)), "peer": peer,
		"remaining": "0", "at": strconv.FormatInt(id.At.UnixMilli(), 10),
	}}
	ev, err := inventory.ParseEvent(e.sale, msg)
	must(t, err)
	if ev.Type != inventory.EventMoved || ev.SKU != sku || ev.Qty != qty || ev.Peer != peer || ev.MoveID == "" {
		t.Fatalf("ParseEvent of a moved entry = %+v", ev)
	}
	return ev
}

// movedRows returns the sale's journal rows of type moved as (event, sku, qty).
func movedRows(t *testing.T, s *Store, saleID string) [][3]string {
	t.Helper()
	j, err := s.Journal(context.Background(), saleID)
	must(t, err)
	var out [][3]string
	for _, e := range j {
		if e.Type == inventory.EventMoved {
			if e.OrderID != "" || e.UserID != "" {
				t.Fatalf("moved journal row with an order or user: %+v", e)
			}
			out = append(out, [3]string{e.EventID, e.SKU, strconv.FormatInt(e.Qty, 10)})
		}
	}
	return out
}

// TestApplyMoved: moves out of and into a sale add their signed units to
// the item's stocked total, each journaled as one "moved" row, once.
func TestApplyMoved(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		e := newEvents("m:0")
		created := e.created(2, inventory.Item{SKU: "A", Stock: 10}, inventory.Item{SKU: "U", Stock: inventory.Unlimited},
			inventory.Item{SKU: "B", Stock: 4})
		b1 := e.bought("u1", line("A", 2))
		out := e.moved(t, "A", -3, "m:1")
		b2 := e.bought("u2", line("A", 1), line("U", 1))
		in := e.moved(t, "A", 5, "m:2")
		unl := e.moved(t, "U", 7, "m:1") // an unlimited item stays unlimited
		outB := e.moved(t, "B", -4, "m:3")
		evs := []inventory.Event{created, b1, out, b2, in, unl, outB}
		must(t, s.Apply(ctx, "m:0", evs))

		st := stateOf(t, s, "m:0")
		// A: 10 - 3 + 5; B: 4 - 4, every unit moved out.
		check(t, "Totals", st.Totals, []ItemTotals{{"A", 12, 3}, {"U", -1, 1}, {"B", 0, 0}})
		check(t, "Sale items", st.Sale.Items, []inventory.Item{{SKU: "A", Stock: 12}, {SKU: "U", Stock: -1}, {SKU: "B", Stock: 0}})
		snap, err := s.Snapshot(ctx, "m:0")
		must(t, err)
		check(t, "Snapshot items", snap.Sale.Items, st.Sale.Items)
		check(t, "moved rows", movedRows(t, s, "m:0"), [][3]string{
			{out.ID, "A", "-3"}, {in.ID, "A", "5"}, {unl.ID, "U", "7"}, {outB.ID, "B", "-4"},
		})
		check(t, "journal rows", st.Journal, 3+1+1+2+3)
		j, err := s.Journal(ctx, "m:0")
		must(t, err)
		for _, r := range j {
			if r.EventID == in.ID && !r.At.Equal(in.At) {
				t.Fatalf("moved row At = %v, want the event's %v", r.At, in.At)
			}
		}

		// Again, alone, in overlapping windows and twice in one batch:
		// nothing changes.
		must(t, s.Apply(ctx, "m:0", evs))
		must(t, s.Apply(ctx, "m:0", []inventory.Event{in}))
		must(t, s.Apply(ctx, "m:0", evs[2:5]))
		must(t, s.Apply(ctx, "m:0", []inventory.Event{out, out, in, in}))
		check(t, "after repeats", stateOf(t, s, "m:0"), st)

		// A new move (another stream id) counts, even with the same units
		// and peer as one applied before.
		again := e.moved(t, "A", -3, "m:1")
		must(t, s.Apply(ctx, "m:0", []inventory.Event{out, again}))
		totals, err := s.Totals(ctx, "m:0")
		must(t, err)
		check(t, "Totals after a second move", totals, []ItemTotals{{"A", 9, 3}, {"U", -1, 1}, {"B", 0, 0}})

		// A move of a sale that was created through the service.
		must(t, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: "svc:1", PerUserLimit: 1,
			Items: []inventory.Item{{SKU: "A", Stock: 5}}}, Settings: `{"require_purchase_token":true}`}))
		e = newEvents("svc:1")
		must(t, s.Apply(ctx, "svc:1", []inventory.Event{e.moved(t, "A", 2, "svc:0"), e.moved(t, "A", -6, "svc:2")}))
		sale, err := s.Sale(ctx, "svc:1")
		must(t, err)
		check(t, "service sale items", sale.Items, []inventory.Item{{SKU: "A", Stock: 1}})
		check(t, "service settings kept", sale.Settings, `{"require_purchase_token":true}`)

		// The largest moves the engine can write are accepted.
		e = newEvents("edge")
		must(t, s.Apply(ctx, "edge", []inventory.Event{
			e.moved(t, "A", inventory.MaxQty, "edge:1"), e.moved(t, "A", -inventory.MaxQty, "edge:1"),
		}))
		check(t, "moved rows of edge", len(movedRows(t, s, "edge")), 2)
	})
}

// TestApplyMovedBeforeCreated: moves of a library-made sale applied before
// its created event (entries reclaimed out of order) count once the
// created event inserts the sale, together with early restocks.
func TestApplyMovedBeforeCreated(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		e := newEvents("lib:1")
		created := e.created(2, inventory.Item{SKU: "A", Stock: 10}, inventory.Item{SKU: "B", Stock: 3},
			inventory.Item{SKU: "U", Stock: inventory.Unlimited})
		early := []inventory.Event{
			e.moved(t, "A", 4, "lib:0"), e.moved(t, "A", -1, "lib:2"), e.restocked("A", 2),
			e.moved(t, "U", 3, "lib:0"), e.moved(t, "B", -3, "lib:0"),
		}
		must(t, s.Apply(ctx, "lib:1", early))
		if _, err := s.Sale(ctx, "lib:1"); !errors.Is(err, inventory.ErrNotFound) {
			t.Fatalf("Sale before its created event = %v, want ErrNotFound", err)
		}
		check(t, "moved rows before created", len(movedRows(t, s, "lib:1")), 4)

		// The created event, a repeat of an early move, and a later move in
		// one batch: the early ones count once, the repeat not again.
		late := e.moved(t, "A", -2, "lib:3")
		must(t, s.Apply(ctx, "lib:1", []inventory.Event{created, early[0], late}))
		want := []ItemTotals{{"A", 10 + 4 - 1 + 2 - 2, 0}, {"B", 0, 0}, {"U", -1, 0}}
		st := stateOf(t, s, "lib:1")
		check(t, "Totals", st.Totals, want)
		check(t, "Sale", st.Sale, Sale{CreatedAt: created.At, Sale: inventory.Sale{ID: "lib:1", PerUserLimit: 2,
			Items: []inventory.Item{{SKU: "A", Stock: 13}, {SKU: "B", Stock: 0}, {SKU: "U", Stock: -1}}}})

		// Everything again, created included: nothing changes.
		must(t, s.Apply(ctx, "lib:1", append(append([]inventory.Event{}, early...), created, late)))
		check(t, "after a repeat", stateOf(t, s, "lib:1"), st)

		// A move in the created event's own batch, before it.
		e = newEvents("lib:2")
		first := e.moved(t, "A", 5, "lib:1")
		c2 := e.created(1, inventory.Item{SKU: "A", Stock: 1})
		must(t, s.Apply(ctx, "lib:2", []inventory.Event{first, c2}))
		totals, err := s.Totals(ctx, "lib:2")
		must(t, err)
		check(t, "Totals of a batch moved-then-created", totals, []ItemTotals{{"A", 6, 0}})

		// Early moves of another sale are not counted in.
		e = newEvents("lib:3")
		must(t, s.Apply(ctx, "lib:3", []inventory.Event{e.created(1, inventory.Item{SKU: "A", Stock: 7})}))
		totals, err = s.Totals(ctx, "lib:3")
		must(t, err)
		check(t, "Totals of a sale with no moves", totals, []ItemTotals{{"A", 7, 0}})
	})
}

// TestApplyRefusesInvalidMoves: a moved event the engine could not have
// written is a *PermanentError naming it, and its batch writes nothing.
func TestApplyRefusesInvalidMoves(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		must(t, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: "p:0", Items: []inventory.Item{{SKU: "A", Stock: 10}}}}))
		e := newEvents("p:0")
		good := e.moved(t, "A", 2, "p:1")
		bad := map[string]func(ev *inventory.Event){
			"zero qty":          func(ev *inventory.Event) { ev.Qty = 0 },
			"qty past MaxQty":   func(ev *inventory.Event) { ev.Qty = inventory.MaxQty + 1 },
			"qty past -MaxQty":  func(ev *inventory.Event) { ev.Qty = -inventory.MaxQty - 1 },
			"huge negative qty": func(ev *inventory.Event) { ev.Qty = -1 << 62 },
			"no peer":           func(ev *inventory.Event) { ev.Peer = "" },
			"peer not an id":    func(ev *inventory.Event) { ev.Peer = "p 1" },
			"peer too long":     func(ev *inventory.Event) { ev.Peer = "p:" + strings.Repeat("1", 100) },
			"peer is the sale":  func(ev *inventory.Event) { ev.Peer = "p:0" },
			"no sku":            func(ev *inventory.Event) { ev.SKU = "" },
			"sku not an id":     func(ev *inventory.Event) { ev.SKU = "A\x00" },
			"other sale":        func(ev *inventory.Event) { ev.SaleID = "p:1" },
			"no stream id":      func(ev *inventory.Event) { ev.ID = "" },
		}
		for name, spoil := range bad {
			ev := e.moved(t, "A", -1, "p:2")
			spoil(&ev)
			err := s.Apply(ctx, "p:0", []inventory.Event{good, ev})
			var perm *PermanentError
			if !errors.Is(err, ErrPermanent) || !errors.As(err, &perm) || perm.EventID != ev.ID {
				t.Errorf("%s: Apply = %v, want a *PermanentError naming event %q", name, err, ev.ID)
			}
			// Alone, first in its batch, too.
			if err := s.Apply(ctx, "p:0", []inventory.Event{ev, good}); !errors.As(err, &perm) || perm.EventID != ev.ID {
				t.Errorf("%s: Apply (first in the batch) = %v, want a *PermanentError naming event %q", name, err, ev.ID)
			}
		}
		// Nothing of a refused batch was written, not even its good event.
		j, err := s.Journal(ctx, "p:0")
		must(t, err)
		check(t, "journal rows", len(j), 0)
		totals, err := s.Totals(ctx, "p:0")
		must(t, err)
		check(t, "Totals", totals, []ItemTotals{{"A", 10, 0}})

		// The consumer dead-letters the bad event and applies the rest.
		must(t, s.Apply(ctx, "p:0", []inventory.Event{good}))
		totals, err = s.Totals(ctx, "p:0")
		must(t, err)
		check(t, "Totals after the good move", totals, []ItemTotals{{"A", 12, 0}})
	})
}

// TestSnapshotMoves: a sale's snapshot lists its moves; a move out has
// arrived once the other sale has applied its in half.
func TestSnapshotMoves(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		a, b := newEvents("sa"), newEvents("sb")
		must(t, s.Apply(ctx, "sa", []inventory.Event{a.created(1, inventory.Item{SKU: "A", Stock: 10})}))
		must(t, s.Apply(ctx, "sb", []inventory.Event{b.created(1, inventory.Item{SKU: "A", Stock: 10})}))
		out1, out2 := a.moved(t, "A", -3, "sb"), a.moved(t, "A", -2, "sb")
		must(t, s.Apply(ctx, "sa", []inventory.Event{out1, out2}))
		in1 := b.moved(t, "A", 3, "sa")
		in1.MoveID = out1.MoveID // the in half of the first move
		must(t, s.Apply(ctx, "sb", []inventory.Event{in1, in1}))

		snap, err := s.Snapshot(ctx, "sa")
		must(t, err)
		check(t, "moves of sa", snap.Moves, []inventory.Move{
			{ID: out1.MoveID, Peer: "sb", SKU: "A", Units: -3, Arrived: true},
			{ID: out2.MoveID, Peer: "sb", SKU: "A", Units: -2},
		})
		snap, err = s.Snapshot(ctx, "sb")
		must(t, err)
		check(t, "moves of sb", snap.Moves, []inventory.Move{{ID: out1.MoveID, Peer: "sa", SKU: "A", Units: 3}})
	})
}
