package archive_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/archive"
	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/store"
)

// Adversarial tests of a pass that removes its sales' keys one by one and
// finishes them (purge, then the mark archived) together at its end: what
// happens between the two, and that a sale marked archived never has keys
// left that only the purge removes.

// archiveHook is the engine with a hook run after each Archive that
// removed a sale's keys.
type archiveHook struct {
	*inventory.Engine
	after func(saleID string)
}

func (h archiveHook) Archive(ctx context.Context, saleID, last string) (inventory.ArchiveCheck, error) {
	res, err := h.Engine.Archive(ctx, saleID, last)
	if err == nil && res.Ready {
		h.after(saleID)
	}
	return res, err
}

// marks returns whether the sale is marked archiving, and archived.
func (r *rig) marks(id string) (archiving, archived bool) {
	r.t.Helper()
	st, err := r.db.Archive(r.ctx, id)
	if err != nil {
		r.t.Fatal(err)
	}
	return st.Archiving(), !st.ArchivedAt.IsZero()
}

// finishedOnlyIfPurged fails the test if a sale is marked archived with
// keys left in Redis, its hash or those only the purge removes.
func (r *rig) finishedOnlyIfPurged(ids []string) {
	r.t.Helper()
	for _, id := range ids {
		if _, archived := r.marks(id); archived && (r.hasSale(id) || r.expiring(id) != 0) {
			r.t.Fatalf("sale %s marked archived with keys left: %s, %d that expire", id, r.state(id), r.expiring(id))
		}
	}
}

// allArchived fails the test unless every sale is marked archived, with
// nothing of it left in Redis.
func (r *rig) allArchived(ids []string) {
	r.t.Helper()
	for _, id := range ids {
		if _, archived := r.marks(id); !archived || r.hasSale(id) || r.expiring(id) != 0 {
			r.t.Fatalf("sale %s: archived %v, %s, %d keys that expire", id, archived, r.state(id), r.expiring(id))
		}
	}
}

// A pass cancelled once it removed the keys of some of its sales, before
// their purge: none of them is marked archived with keys that expire on
// their own left, the sale it did not reach is untouched, and the next
// pass purges and marks every one of them (those found with their keys
// gone included).
func TestAdvPassCancelledBeforeItsPurgeIsFinishedByTheNext(t *testing.T) {
	r := realRig(t)
	ids := r.endedSales("cut", 4)
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	removed := 0
	eng := archiveHook{Engine: r.eng, after: func(string) {
		if removed++; removed == 3 {
			cancel()
		}
	}}
	archived, _, err := archive.New(eng, r.db, archive.Options{}).Pass(ctx)
	if !errors.Is(err, context.Canceled) || archived != 0 {
		t.Fatalf("cancelled pass: %d archived, %v; want none, context.Canceled", archived, err)
	}
	r.finishedOnlyIfPurged(ids)
	for i, id := range ids {
		archiving, _ := r.marks(id)
		switch {
		case i < 3 && (!archiving || r.hasSale(id)):
			t.Fatalf("sale %s removed before the cancel: archiving %v, %s; want archiving, its keys removed",
				id, archiving, r.state(id))
		case i >= 3 && (archiving || !r.hasSale(id)):
			t.Fatalf("sale %s after the cancel: archiving %v, %s; want untouched", id, archiving, r.state(id))
		}
	}

	archived, waiting, err := archive.New(r.eng, r.db, archive.Options{}).Pass(r.ctx)
	if err != nil || archived != 1 || waiting != 0 {
		t.Fatalf("the next pass: %d archived, %d waiting, %v; want the one not reached archived, the others finished", archived, waiting, err)
	}
	r.allArchived(ids)
}

// Redis is found not to sell once the pass removed the keys of its first
// sale: the sales after it are not touched at all (not even marked
// archiving), no sale is marked archived with keys left, and once Redis
// sells again every sale is archived.
func TestAdvPassPausedMidwayMarksNothingUnpurged(t *testing.T) {
	r := realRig(t)
	ids := r.endedSales("halt", 3)
	paused := false
	eng := archiveHook{Engine: r.eng, after: func(string) { paused = true }}
	arch := archive.New(eng, r.db, archive.Options{Paused: func() bool { return paused }})
	_, waiting, err := arch.Pass(r.ctx)
	if err != nil || waiting < 2 {
		t.Fatalf("pass paused after its first sale: %d waiting, %v", waiting, err)
	}
	r.finishedOnlyIfPurged(ids)
	if archiving, _ := r.marks(ids[0]); !archiving || r.hasSale(ids[0]) {
		t.Fatalf("sale %s: archiving %v, %s; want its keys removed", ids[0], archiving, r.state(ids[0]))
	}
	for _, id := range ids[1:] {
		if archiving, _ := r.marks(id); archiving || !r.hasSale(id) || r.expiring(id) == 0 {
			t.Fatalf("sale %s archived while redis does not sell: archiving %v, %s", id, archiving, r.state(id))
		}
	}
	paused = false
	eng.after = func(string) {}
	if _, waiting, err := archive.New(eng, r.db, archive.Options{Paused: func() bool { return paused }}).Pass(r.ctx); err != nil || waiting != 0 {
		t.Fatalf("pass once redis sells: %d waiting, %v", waiting, err)
	}
	r.allArchived(ids)
}

// Redis goes down once the pass removed the keys of all its sales, before
// their purge: the purge fails and no sale is marked archived. Redis comes
// back empty (no persistence): the next pass finds the sales archiving
// with their keys gone, and purges and marks each.
func TestAdvPassRedisDownBeforeItsPurge(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	r := newRig(t, rdb, "adv", dbtest.PostgresURL(t))
	ids := r.endedSales("down", 3)
	removed := 0
	eng := archiveHook{Engine: r.eng, after: func(string) {
		if removed++; removed == len(ids) {
			if err := srv.Kill(); err != nil {
				t.Error(err)
			}
		}
	}}
	archived, waiting, err := archive.New(eng, r.db, archive.Options{}).Pass(r.ctx)
	if _, ok := errors.AsType[*inventory.PurgeError](err); !ok || archived != 0 || waiting != len(ids) {
		t.Fatalf("pass with redis down before its purge: %d archived, %d waiting, %v; want a PurgeError, all waiting",
			archived, waiting, err)
	}
	for _, id := range ids {
		if archiving, marked := r.marks(id); !archiving || marked {
			t.Fatalf("sale %s: archiving %v, archived %v; want archiving, not archived (its purge failed)", id, archiving, marked)
		}
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	arch := archive.New(r.eng, r.db, archive.Options{})
	var lastErr error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, waiting, lastErr = arch.Pass(r.ctx); lastErr == nil && waiting == 0 {
			break
		}
	}
	if lastErr != nil || waiting != 0 {
		t.Fatalf("passes once redis is back: %d waiting, %v", waiting, lastErr)
	}
	r.allArchived(ids)
}

// Between the removal of a sale's keys and its purge at the end of the
// pass (a window as long as the pass), nothing brings the sale back to
// Redis, where the purge would remove keys of a live sale: the database
// refuses a sale, or a segmented sale with a segment, of its id (the
// service creates there first), and the Loader refuses to rebuild it.
func TestAdvSaleRemovedEarlyInAPassCannotComeBackBeforeItsPurge(t *testing.T) {
	r := realRig(t)
	ids := r.endedSales("back", 3)
	tried := 0
	eng := archiveHook{Engine: r.eng, after: func(id string) {
		tried++
		s := inventory.Sale{ID: id, PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 5}}}
		if err := r.db.CreateSale(r.ctx, store.Sale{Sale: s}); !errors.Is(err, inventory.ErrExists) {
			t.Errorf("sale %s created again in the database while archiving: %v", id, err)
		}
		seg := s
		seg.ID = "seg-" + id
		err := r.db.CreateSegmentedSale(r.ctx, id, []store.Sale{{Sale: seg}})
		if !errors.Is(err, inventory.ErrExists) {
			t.Errorf("segmented sale %s created over the sale archiving: %v", id, err)
		}
		seg.ID = id
		err = r.db.CreateSegmentedSale(r.ctx, "parent-"+id, []store.Sale{{Sale: seg}})
		if !errors.Is(err, inventory.ErrExists) {
			t.Errorf("a segment %s created over the sale archiving: %v", id, err)
		}
		if _, err := r.eng.Stock(r.ctx, id); !errors.As(err, new(*inventory.ArchivedError)) {
			t.Errorf("sale %s read while archiving: %v; want ArchivedError (not rebuilt)", id, err)
		}
	}}
	archived, waiting, err := archive.New(eng, r.db, archive.Options{}).Pass(r.ctx)
	if err != nil || archived != len(ids) || waiting != 0 || tried != len(ids) {
		t.Fatalf("pass: %d archived, %d waiting, %v (%d tried)", archived, waiting, err, tried)
	}
	r.allArchived(ids)
}
