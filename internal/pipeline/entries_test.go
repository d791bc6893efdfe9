package pipeline_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/pipeline"
)

// buyMany buys n orders of one unit, users u<from>.., in BuyMany calls of
// per buys each: on Redis, one stream entry of per orders a call.
func (r *rig) buyMany(n, from, per int) []string {
	r.t.Helper()
	var ids []string
	for done := 0; done < n; done += per {
		var reqs []inventory.BuyRequest
		for i := from + done; i < from+min(done+per, n); i++ {
			reqs = append(reqs, inventory.BuyRequest{SaleID: "s1", UserID: fmt.Sprintf("u%d", i), Lines: []inventory.Line{{SKU: "A", Qty: 1}}})
		}
		for _, res := range r.eng.BuyMany(r.ctx, reqs) {
			if res.Err != nil {
				r.t.Fatal(res.Err)
			}
			ids = append(ids, res.Receipt.Order.ID)
		}
	}
	return ids
}

// TestEntriesOfSeveralOrdersKilledMidBatch: entries of several orders
// (one a buy.lua call) held by a consumer that dies before or after its
// commit are stored, every order once, by the one that takes them over;
// until then every order of them is in flight.
func TestEntriesOfSeveralOrdersKilledMidBatch(t *testing.T) {
	for _, commit := range []bool{false, true} {
		t.Run(fmt.Sprintf("after commit=%v", commit), func(t *testing.T) {
			forEachStack(t, func(t *testing.T, r *rig) {
				r.sale(0)
				ids := r.buyMany(70, 0, 7)
				inflight, err := pipeline.InFlight(r.ctx, r.rdb, r.eng, "s1")
				if err != nil || len(inflight) != 1+70 { // created, and every order
					t.Fatalf("in flight: %d events (%v), want 71", len(inflight), err)
				}
				d := &dying{Store: r.db, commit: commit, entered: make(chan struct{}), release: make(chan struct{})}
				r.consumer("doomed", d, pipeline.Options{BatchSize: 4})
				t.Cleanup(func() { close(d.release) })
				<-d.entered // it holds 4 entries (22 orders on Redis) it will never acknowledge
				ids = append(ids, r.buyMany(30, 70, 10)...)
				r.consumer("survivor", r.db, pipeline.Options{BatchSize: 4})
				r.settled(ids)
			})
		})
	}
}

// TestDeadLetterOneOrderOfAnEntry: of an entry of several orders, an order
// that does not decode and one the database refuses for good are each
// dead-lettered on their own, under their own ids, with their own fields;
// the entry's other orders are stored, and it is acknowledged.
func TestDeadLetterOneOrderOfAnEntry(t *testing.T) {
	forEachStack(t, func(t *testing.T, r *rig) {
		ids := r.sale(3)
		rec := func(id, user string) string { return id + "|p|" + user + "|1700000000000|A=1|" }
		good1, good2 := inventory.NewOrderID("s1"), inventory.NewOrderID("s1")
		corrupt := "x|p|u|notatime|A=1|"
		other := rec(inventory.NewOrderID("s2"), "u92") // an order of another sale: the store refuses it
		key := r.eng.EventsKey("s1")
		entry, err := r.rdb.XAdd(r.ctx, &redis.XAddArgs{Stream: key,
			Values: []any{"orders", strings.Join([]string{rec(good1, "u90"), corrupt, other, rec(good2, "u93")}, "\n")}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		ms, seq := inventory.SplitEventID(entry)
		// As buy.lua does; the embedded server has no XSETID (nothing is
		// added after the entry there).
		_ = r.rdb.Do(r.ctx, "XSETID", key, fmt.Sprintf("%d-%d", ms, seq+3)).Err()
		r.consumer("c1", r.db, pipeline.Options{})
		r.settled(append(ids, good1, good2))
		letters, err := r.db.DeadLetters(r.ctx, "s1")
		if err != nil || len(letters) != 2 {
			t.Fatalf("dead letters %+v, %v", letters, err)
		}
		want := map[string]string{fmt.Sprintf("%d-%d", ms, seq+1): corrupt, fmt.Sprintf("%d-%d", ms, seq+2): other}
		for _, l := range letters {
			var fields map[string]string
			if err := json.Unmarshal([]byte(l.Payload), &fields); err != nil {
				t.Fatal(err)
			}
			if w, ok := want[l.EventID]; !ok || len(fields) != 1 || fields["bought"] != w {
				t.Errorf("dead letter %s: %v, want bought %q", l.EventID, fields, w)
			}
		}
	})
}

// TestLagOfEntriesOfSeveralOrders (Redis): the backlog counts entries
// (Redis's lag, which XSETID leaves alone), the in-flight events every
// order; once stored, nothing is behind and the database holds the stream
// up to its last generated id, the last order's. A lag Redis cannot tell
// (an entry deleted past the group's position) is counted.
func TestLagOfEntriesOfSeveralOrders(t *testing.T) {
	forEachStack(t, func(t *testing.T, r *rig) {
		if strings.Contains(t.Name(), "miniredis") {
			t.Skip("the embedded server has no XSETID and overstates the lag")
		}
		key := r.eng.EventsKey("s1")
		if err := r.rdb.XGroupCreateMkStream(r.ctx, key, pipeline.Group, "0").Err(); err != nil {
			t.Fatal(err)
		}
		r.sale(0)
		ids := r.buyMany(15, 0, 5) // created, then 3 entries of 5 orders
		lag, err := pipeline.ReadLag(r.ctx, r.rdb, r.eng, "s1")
		if err != nil || lag.Entries != 4 {
			t.Fatalf("lag %+v (%v), want 4 entries", lag, err)
		}
		// Another consumer takes the first two entries and dies.
		if err := r.rdb.XReadGroup(r.ctx, &redis.XReadGroupArgs{Group: pipeline.Group, Consumer: "gone", Streams: []string{key, ">"}, Count: 2}).Err(); err != nil {
			t.Fatal(err)
		}
		lag, err = pipeline.ReadLag(r.ctx, r.rdb, r.eng, "s1")
		inflight, err2 := pipeline.InFlight(r.ctx, r.rdb, r.eng, "s1")
		if err != nil || err2 != nil || lag.Entries != 4 || len(inflight) != 16 {
			t.Fatalf("lag %+v, %d events in flight (%v, %v): want 4 entries, 16 events", lag, len(inflight), err, err2)
		}
		// The third entry deleted: Redis no longer tells the lag.
		msgs, _ := r.rdb.XRange(r.ctx, key, "-", "+").Result()
		if err := r.rdb.XDel(r.ctx, key, msgs[2].ID).Err(); err != nil {
			t.Fatal(err)
		}
		if gs, _ := r.rdb.XInfoGroups(r.ctx, key).Result(); len(gs) != 1 || gs[0].Lag != -1 {
			t.Fatalf("groups %+v: want a lag Redis cannot tell", gs)
		}
		lag, err = pipeline.ReadLag(r.ctx, r.rdb, r.eng, "s1")
		if err != nil || lag.Entries != 3 { // 2 pending, 1 undelivered
			t.Fatalf("lag %+v (%v), want 3 entries", lag, err)
		}
		ids = append(ids[:5], ids[10:]...) // the deleted entry's orders are gone
		r.consumer("c1", r.db, pipeline.Options{ClaimIdle: 1})
		r.settled(ids)
		lag, err = pipeline.ReadLag(r.ctx, r.rdb, r.eng, "s1")
		info, err2 := r.rdb.XInfoStream(r.ctx, key).Result()
		applied, err3 := pipeline.Applied(r.ctx, r.rdb, r.eng, "s1")
		if err != nil || err2 != nil || err3 != nil || lag.Entries != 0 || !lag.Oldest.IsZero() || applied != info.LastGeneratedID {
			t.Fatalf("after: lag %+v, applied %q, last generated %q (%v %v %v)", lag, applied, info.LastGeneratedID, err, err2, err3)
		}
		journal, _ := r.db.Journal(r.ctx, "s1")
		newest := ""
		for _, j := range journal {
			if inventory.CompareEventIDs(j.EventID, newest) > 0 {
				newest = j.EventID
			}
		}
		if newest != info.LastGeneratedID {
			t.Fatalf("the journal's newest event %s, the stream's last generated id %s", newest, info.LastGeneratedID)
		}
	})
}
