package pipeline_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/pipeline"
)

// TestSettledAfterEntriesOfSeveralOrders: once a stream whose last entry
// holds several orders (its last generated id is that entry's last
// order's, above the entry's own id) is stored, it is settled for every
// script that asks (a repair, the archiver's check, a rebuild's commit),
// the database's newest event is the stream's last generated id, and a
// sale lost with its stream is rebuilt with every unit sold and its new
// orders stored once each, above the floor.
func TestSettledAfterEntriesOfSeveralOrders(t *testing.T) {
	forEachStack(t, func(t *testing.T, r *rig) {
		r.sale(0)
		ids := r.buyMany(12, 0, 4)
		r.consumer("c1", r.db, pipeline.Options{BatchSize: 2})
		r.settled(ids)
		key := r.eng.EventsKey("s1")
		info, err := r.rdb.XInfoStream(r.ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(t.Name(), "miniredis") && info.LastGeneratedID == info.LastEntry.ID {
			t.Fatalf("last generated id %s is the last entry's: want an entry of several orders last", info.LastGeneratedID)
		}
		applied, err := pipeline.Applied(r.ctx, r.rdb, r.eng, "s1")
		newest, err2 := r.db.NewestEvent(r.ctx, "s1")
		if err != nil || err2 != nil || applied != info.LastGeneratedID || newest != info.LastGeneratedID {
			t.Fatalf("applied %q, database's newest %q, stream's last generated id %q (%v %v)", applied, newest, info.LastGeneratedID, err, err2)
		}
		eng := r.rebuildingEngine(5 * time.Second)
		if _, err := eng.Repair(r.ctx, "s1", nil); err != nil {
			t.Fatalf("repair of a settled sale: %v", err)
		}
		if chk, err := eng.CheckArchive(r.ctx, "s1"); err != nil || chk.Reason != "active" {
			t.Fatalf("archive check %+v (%v): want only not ended", chk, err)
		}
		// Redis loses the sale and its stream: the rebuild raises the new
		// stream's last id to the database's newest event.
		var lost []string
		for _, k := range []string{"sale", "bought", "orders", "idem", "events"} {
			lost = append(lost, eng.Key("s1", k))
		}
		if err := r.rdb.Del(r.ctx, lost...).Err(); err != nil {
			t.Fatal(err)
		}
		st, err := eng.Stock(r.ctx, "s1")
		if err != nil || st.Items[0].Remaining != 100_000-12 {
			t.Fatalf("stock after rebuild %+v (%v), want %d remaining", st, err, 100_000-12)
		}
		r.eng = eng
		more := r.buyMany(8, 12, 4)
		msgs, _ := r.rdb.XRange(r.ctx, key, "-", "+").Result()
		for _, m := range msgs {
			if inventory.CompareEventIDs(m.ID, newest) <= 0 {
				t.Fatalf("entry %s at or below the database's newest event %s", m.ID, newest)
			}
		}
		r.settled(append(ids, more...))
		var inFlight *inventory.InFlightError
		if _, err := eng.Repair(r.ctx, "s1", nil); errors.As(err, &inFlight) || err != nil {
			t.Fatalf("repair after: %v", err)
		}
	})
}
