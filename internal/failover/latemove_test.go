package failover_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/failover"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/pipeline"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/store"
	"github.com/seckill/seckill/internal/waitfor"
)

// gatedStore is the consumer's database (pipeline.Store only: no
// ApplyMany, which would bypass the gate). It holds the consumer's write of
// one sale once armed, until released, and tells when that write has
// committed.
type gatedStore struct {
	db        *store.Store
	sale      string
	armed     chan struct{} // closed: hold the sale's next write
	entered   chan struct{} // closed when a held write waits
	release   func()        // lets the held write go (once)
	committed chan struct{} // closed when the held write has committed
	released  chan struct{}
	once      sync.Once
}

func (g *gatedStore) Apply(ctx context.Context, saleID string, events []inventory.Event) error {
	held := false
	if saleID == g.sale {
		select {
		case <-g.armed:
			select {
			case <-g.entered:
			default:
				held = true
				close(g.entered)
			}
		default:
		}
	}
	if !held {
		return g.db.Apply(ctx, saleID, events)
	}
	<-g.released
	err := g.db.Apply(ctx, saleID, events)
	if err == nil {
		close(g.committed)
	}
	return err
}

func (g *gatedStore) SaleEnds(ctx context.Context) (map[string]time.Time, error) {
	return g.db.SaleEnds(ctx)
}

func (g *gatedStore) DeadLetter(ctx context.Context, saleID, eventID, reason string, fields map[string]any) error {
	return g.db.DeadLetter(ctx, saleID, eventID, reason, fields)
}

// lateStore is the seller's database: its read of a snapshot (the repair's)
// lets the held write go right after it, and waits for its commit.
type lateStore struct {
	*store.Store
	g *gatedStore
}

func (s lateStore) Snapshot(ctx context.Context, saleID string) (inventory.Snapshot, error) {
	snap, err := s.Store.Snapshot(ctx, saleID)
	if saleID == s.g.sale {
		s.g.release()
		<-s.g.committed
	}
	return snap, err
}

// TestRepairWaitsForTheConsumersRoundUnderWay: the order consumer read a
// move's out half (sale A's moved event) from a Redis that then lost it (a
// failover to a replica that was behind; here: a second server with a copy
// made before the move), and its write of it to the database lands late.
// The recovery waits on the streams of the Redis it repairs, which never
// held that event, and the hand-over of acks carries no moves: without
// waiting for the consumer's round under way (Parts.Rounds), the repair
// read the database before the move-out was in it. Redis then kept A's 3
// units, while the move's in half (applied in time) gave them to B too:
// Redis held 23 units of the 20 stocked, the 3 could be sold twice, and A's
// remaining in Redis disagreed with the database's until reconciliation.
//
// The held write is let go by whichever comes first: the hand-over asking
// for the consumer's rounds (the fix), or the repair's read of the database
// (it then lands right after that read, before the repair writes).
func TestRepairWaitsForTheConsumersRoundUnderWay(t *testing.T) {
	ctx := context.Background()
	oldSrv, newSrv := redistest.StartServer(t), redistest.StartServer(t)
	rOld, rNew := oldSrv.Client(t), newSrv.Client(t)
	db, err := store.Open(ctx, dbtest.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	g := &gatedStore{db: db, sale: "lmA", armed: make(chan struct{}), entered: make(chan struct{}),
		committed: make(chan struct{}), released: make(chan struct{})}
	g.release = func() { g.once.Do(func() { close(g.released) }) }
	t.Cleanup(g.release)

	const prefix = "latemove:"
	engOld := inventory.New(rOld, inventory.Options{Prefix: prefix})
	for _, id := range []string{"lmA", "lmB"} {
		sale := inventory.Sale{ID: id, PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 10}}}
		if err := db.CreateSale(ctx, store.Sale{Sale: sale}); err != nil {
			t.Fatal(err)
		}
		if err := engOld.CreateSale(ctx, sale); err != nil {
			t.Fatal(err)
		}
	}
	cctx, stop := context.WithCancel(ctx)
	// Two readers: lmA's and lmB's streams are read by different ones (the
	// consumer shares sales out by FNV-32a of the id), so that B's in half
	// is written while A's reader is held.
	cons := pipeline.New(rOld, engOld, g, pipeline.Options{Block: 10 * time.Millisecond, DiscoverAll: 20 * time.Millisecond,
		Linger: -1, Readers: 2})
	done := make(chan struct{})
	go func() { defer close(done); _ = cons.Run(cctx) }()
	t.Cleanup(func() { stop(); g.release(); <-done })
	settled := func(rdb *redis.Client) func() error {
		return func() error {
			for _, id := range []string{"lmA", "lmB"} {
				in, err := pipeline.InFlight(ctx, rdb, engOld, id)
				if err == nil && len(in) > 0 {
					err = fmt.Errorf("sale %s: %d events in flight", id, len(in))
				}
				if err != nil {
					return err
				}
			}
			return nil
		}
	}
	waitfor.Until(t, waitfor.Patience, "the sales created in the database", settled(rOld))

	// The replica has all of it so far; it is cut off before the move.
	host, port, _ := strings.Cut(oldSrv.Addr(), ":")
	if err := rNew.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, waitfor.Patience, "the replica has the sales, settled", func() error {
		if err := rNew.Exists(ctx, engOld.Key("lmB", "sale")).Err(); err != nil {
			return err
		}
		if info := rNew.Info(ctx, "replication").Val(); !strings.Contains(info, "master_link_status:up") {
			return errors.New("link not up")
		}
		return settled(rNew)()
	})
	if err := rNew.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}

	// The move on the old master: the consumer writes B's in half, and is
	// held writing A's out half.
	close(g.armed)
	if n, err := engOld.Move(ctx, "lmA", "lmB", "A", 3); err != nil || n != 3 {
		t.Fatalf("Move = %d, %v", n, err)
	}
	<-g.entered
	waitfor.Until(t, waitfor.Patience, "B's in half in the database", func() error {
		totals, err := db.Totals(ctx, "lmB")
		if err == nil && (len(totals) != 1 || totals[0].Stocked != 13) {
			err = fmt.Errorf("totals of B %+v", totals)
		}
		return err
	})

	// The promoted master is recovered: the mode recovering, the seller's
	// recovery on it.
	m, err := db.SellMode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m, err = db.SwitchMode(ctx, m.Epoch, store.ModeRecovering, time.Now(), time.Time{}, "test: a failover"); err != nil {
		t.Fatal(err)
	}
	engNew := inventory.New(rNew, inventory.Options{Prefix: prefix})
	f := failover.New(failover.Config{Tick: time.Hour})
	f.Wire(failover.Parts{Engine: engNew, Store: lateStore{db, g}, Consumer: "late",
		Streams: streams{rNew, engNew}, Ping: func(ctx context.Context) error { return rNew.Ping(ctx).Err() },
		Rounds: func(ctx context.Context) error {
			g.release()
			return cons.WaitRounds(ctx)
		}})
	f.Recover(ctx, m)
	if m, err := db.SellMode(ctx); err != nil || m.Mode != store.ModeRedis {
		t.Fatalf("mode after Recover: %+v, %v; want redis", m, err)
	}
	<-g.committed

	rem, err := engNew.Remaining(ctx, "A", "lmA", "lmB")
	if err != nil {
		t.Fatal(err)
	}
	var inDB []int64
	for _, id := range []string{"lmA", "lmB"} {
		totals, err := db.Totals(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		inDB = append(inDB, totals[0].Stocked-totals[0].Sold)
	}
	if rem[0]+rem[1] > 20 || rem[0] != inDB[0] || rem[1] != inDB[1] {
		t.Errorf("after the recovery: remaining in redis %v (%d of the 20 units stocked), in the database %v; "+
			"the move's out half reached the database after the repair read it", rem, rem[0]+rem[1], inDB)
	}
}

type streams struct {
	rdb  redis.UniversalClient
	keys pipeline.StreamKeys
}

func (s streams) InFlight(ctx context.Context, saleID string) ([]inventory.Event, error) {
	return pipeline.InFlight(ctx, s.rdb, s.keys, saleID)
}
