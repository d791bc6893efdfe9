package reconcile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/store"
)

// Repaired is the outcome of Repair.
type Repaired struct {
	// Before is the pass that looked for drift; After the pass after the
	// repair (Before again when nothing was written).
	Before, After Report
	// Changes is what the repair set in Redis, as journaled; empty when
	// nothing was written.
	Changes []inventory.RepairChange
	// Skipped says why drift was left as it is ("" when there was none or
	// it was repaired): events in flight to the database, a buy racing the
	// repair, or nothing Redis holds differing from the database (numbers
	// in motion).
	Skipped string
}

// Repair reconciles the sale and, if the pass finds drift, sets Redis's
// state of the sale back to the database's (inventory.Engine.Repair) and
// journals every change in the database's repairs table. It never repairs
// while events of the sale are in flight to the database, nor unless Redis
// is the seller (the sell mode is redis, the same epoch from before the
// comparison until after the database was read): then the drift is left,
// and Skipped says why. Errors are failures to compare, to repair, or to
// journal a repair that was made (Changes then says what it changed).
//
// Why the sell mode: Engine.Repair writes only if the sale's stream has not
// moved since it found it settled, which proves the database's snapshot
// current only while the database changes through the stream alone. In
// degraded mode the database sells by itself (its buys never touch the
// stream) and is ahead of Redis by design, not drift; the recovery repairs
// Redis once nobody sells (recovering), and a repair of the loop's meanwhile
// could write a snapshot older than the recovery's over it, handing the
// units the database sold in between to Redis to sell again.
func Repair(ctx context.Context, eng *inventory.Engine, rdb redis.UniversalClient, db *store.Store, saleID string) (Repaired, error) {
	mode, err := db.SellMode(ctx)
	if err != nil {
		return Repaired{}, fmt.Errorf("reconcile %s: %w", saleID, err)
	}
	if mode.Mode != store.ModeRedis {
		return Repaired{Skipped: notSelling(mode)}, nil
	}
	before, err := Sale(ctx, eng, rdb, db, saleID)
	if err != nil {
		return Repaired{}, err
	}
	out := Repaired{Before: before, After: before}
	if !before.Drifted() {
		return out, nil
	}
	// The snapshot counts only if Redis sold all along: the mode read after
	// it is still redis at the epoch read before the comparison (epochs
	// only grow, so no switch came in between).
	snapshot := inventory.LoaderFunc(func(ctx context.Context, id string) (inventory.Snapshot, error) {
		snap, err := db.Snapshot(ctx, id)
		if err != nil {
			return snap, err
		}
		now, err := db.SellMode(ctx)
		if err != nil {
			return inventory.Snapshot{}, err
		}
		if now.Mode != store.ModeRedis || now.Epoch != mode.Epoch {
			return inventory.Snapshot{}, &modeSwitched{now: now}
		}
		return snap, nil
	})
	rep, err := eng.Repair(ctx, saleID, snapshot)
	var inflight *inventory.InFlightError
	var switched *modeSwitched
	switch {
	case errors.As(err, &inflight):
		out.Skipped = skipReason(inflight)
		return out, nil
	case errors.As(err, &switched):
		out.Skipped = "the sell mode switched while comparing; nothing was written: " + notSelling(switched.now)
		return out, nil
	case err != nil:
		return out, fmt.Errorf("reconcile %s: repair: %w", saleID, err)
	case !rep.Changed():
		out.Skipped = "Redis holds what the database says: the drift was numbers in motion"
		return out, nil
	}
	out.Changes = rep.Changes
	if err := db.JournalRepair(ctx, rep, "reconcile: "+describeDrift(before), time.Now()); err != nil {
		return out, fmt.Errorf("reconcile %s: repaired Redis (%s) but could not journal it: %w", saleID, Describe(rep.Changes), err)
	}
	if out.After, err = Sale(ctx, eng, rdb, db, saleID); err != nil {
		return out, err
	}
	return out, nil
}

// modeSwitched: the sell mode left redis, or its epoch moved on, while
// Repair compared the sale; the snapshot may miss what the database sold.
type modeSwitched struct{ now store.SellMode }

func (e *modeSwitched) Error() string {
	return fmt.Sprintf("the sell mode switched to %s (epoch %d) while repairing", e.now.Mode, e.now.Epoch)
}

// notSelling says why Repair does not judge drift while Redis is not the seller.
func notSelling(m store.SellMode) string {
	if m.Mode == store.ModeRedis {
		return fmt.Sprintf("degraded mode came and went (now epoch %d)", m.Epoch)
	}
	return fmt.Sprintf("degraded mode (%s, epoch %d): Redis is not the seller; the recovery repairs it from the database", m.Mode, m.Epoch)
}

func skipReason(e *inventory.InFlightError) string {
	switch {
	case e.Raced:
		return "a buy, cancel or restock came in while repairing; nothing was written"
	case e.Group == "":
		return "events in flight: the order stream has entries and no consumer reads it"
	case e.Pending > 0:
		return fmt.Sprintf("events in flight: %d entries read and not yet stored by consumer group %s", e.Pending, e.Group)
	}
	return "events in flight: entries not yet read by consumer group " + e.Group
}

// describeDrift is the drift of a report, per item: "A: drift -1, stock drift 2".
func describeDrift(r Report) string {
	var parts []string
	for _, it := range r.Items {
		var d []string
		for _, v := range []struct {
			name string
			n    int64
		}{{"drift", it.Drift}, {"stock drift", it.StockDrift}, {"stocked drift", it.StockedDrift}, {"held drift", it.HeldDrift}} {
			if v.n != 0 {
				d = append(d, fmt.Sprintf("%s %d", v.name, v.n))
			}
		}
		if len(d) > 0 {
			parts = append(parts, it.SKU+": "+strings.Join(d, ", "))
		}
	}
	return strings.Join(parts, "; ")
}

// Describe says in one line what a repair changed:
// "A remaining 12->9, A sold 5->6 (1 record), paused 1->0".
func Describe(changes []inventory.RepairChange) string {
	parts := make([]string, 0, len(changes))
	for _, c := range changes {
		p := string(c.Field)
		if c.SKU != "" {
			p = c.SKU + " " + p
		}
		p += fmt.Sprintf(" %d->%d", c.Before, c.After)
		switch c.Field {
		case inventory.RepairSold, inventory.RepairHeld, inventory.RepairIdempotencyKeys:
			unit := map[inventory.RepairField]string{inventory.RepairSold: "order record", inventory.RepairHeld: "buyer count",
				inventory.RepairIdempotencyKeys: "key"}[c.Field]
			if c.Fixed != 1 {
				unit += "s"
			}
			p += fmt.Sprintf(" (%d %s)", c.Fixed, unit)
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ", ")
}

// PrintRepair writes the outcome of Repair: the pass that found drift, then
// what was repaired and the pass after it, or why nothing was.
func PrintRepair(w io.Writer, r Repaired) {
	Print(w, r.Before)
	switch {
	case len(r.Changes) > 0:
		fmt.Fprintf(w, "repaired from the database: %s\n", Describe(r.Changes))
		Print(w, r.After)
	case r.Skipped != "":
		fmt.Fprintf(w, "not repaired: %s\n", r.Skipped)
	}
}
