package archive_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/archive"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/waitfor"
)

// endedSales makes n sales named <name>0, <name>1, ... that end at once,
// each with a buy stored in the database and a restock marker (op:*, a key
// that expires on its own, which only the purge removes), and waits until
// every one is archivable.
func (r *rig) endedSales(name string, n int) []string {
	r.t.Helper()
	end := time.Now().Add(1500 * time.Millisecond)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%d", name, i)
		r.saleUntil(ids[i], 1, end)
		if _, err := r.eng.Restock(r.ctx, ids[i], "A", 1); err != nil {
			r.t.Fatal(err)
		}
	}
	r.consume("c")
	r.waitArchivable(waitfor.Patience, ids)
	for _, id := range ids {
		if r.expiring(id) == 0 {
			r.t.Fatalf("sale %s has no key that expires on its own: the test tests nothing", id)
		}
	}
	return ids
}

// waitArchivable waits up to patience for every sale of ids to have ended
// with its stream settled and its last event in the database: what a pass
// needs to archive it.
func (r *rig) waitArchivable(patience time.Duration, ids []string) {
	r.t.Helper()
	waitfor.Until(r.t, patience, "the sales to end with their events stored", func() error {
		for _, id := range ids {
			chk, err := r.eng.CheckArchive(r.ctx, id)
			if err != nil || !chk.Ready {
				return fmt.Errorf("%s: check %+v, %v", id, chk, err)
			}
			if newest, err := r.db.NewestEvent(r.ctx, id); err != nil || newest != chk.Last {
				return fmt.Errorf("%s: database at %s (%v), stream at %s", id, newest, err, chk.Last)
			}
		}
		return nil
	})
}

// expiring counts the keys of the sale that only the purge removes.
func (r *rig) expiring(id string) int {
	r.t.Helper()
	keys, err := r.rdb.Keys(r.ctx, r.eng.Key(id, "op:*")).Result()
	if err != nil {
		r.t.Fatal(err)
	}
	return len(keys)
}

// scanWalks counts the walks of the keyspace (SCAN calls from cursor 0)
// a client makes over the keys of one prefix.
type scanWalks struct {
	match string
	n     atomic.Int64
}

func (s *scanWalks) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *scanWalks) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.count(cmd)
		return next(ctx, cmd)
	}
}

func (s *scanWalks) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			s.count(c)
		}
		return next(ctx, cmds)
	}
}

func (s *scanWalks) count(cmd redis.Cmder) {
	a := cmd.Args()
	if cmd.Name() != "scan" || len(a) < 4 || fmt.Sprint(a[1]) != "0" {
		return
	}
	if m, ok := a[3].(string); ok && strings.HasPrefix(m, s.match) {
		s.n.Add(1)
	}
}

// Sales archived in one pass are purged in one walk of the keyspace, not
// one each; the sweeps of the passes after make none.
func TestPassPurgesItsSalesInOneWalk(t *testing.T) {
	r := realRig(t)
	ids := r.endedSales("walk", 12)
	walks := &scanWalks{match: strings.TrimSuffix(r.eng.Key("", ""), "}:")} // "{<prefix>:"
	r.rdb.(*redis.Client).AddHook(walks)

	arch := archive.New(r.eng, r.db, archive.Options{})
	archived, waiting, err := arch.Pass(r.ctx)
	if err != nil || archived != len(ids) || waiting != 0 {
		t.Fatalf("pass: %d archived, %d waiting, %v; want all %d archived", archived, waiting, err, len(ids))
	}
	if n := walks.n.Load(); n != 1 {
		t.Fatalf("a pass that archived %d sales walked the keyspace %d times, want once", len(ids), n)
	}
	for _, id := range ids {
		if r.hasSale(id) || r.expiring(id) != 0 {
			t.Fatalf("left of sale %s: %s, %d keys that expire", id, r.state(id), r.expiring(id))
		}
		if st, err := r.db.Archive(r.ctx, id); err != nil || st.ArchivedAt.IsZero() {
			t.Fatalf("sale %s: archive state %+v, %v", id, st, err)
		}
	}
	for range 2 { // the sweeps of the sales archived
		if _, _, err := arch.Pass(r.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := walks.n.Load(); n != 1 {
		t.Fatalf("sweeps walked the keyspace %d times", n-1)
	}
}

// purgeFault is the engine with a purge that fails: err, of every sale,
// without purging any; or, with left, a PurgeError naming those of left
// after purging the others.
type purgeFault struct {
	*inventory.Engine
	err  error
	left []string
}

func (f purgeFault) PurgeArchived(ctx context.Context, saleIDs ...string) (int, error) {
	if f.left == nil {
		return 0, f.err
	}
	var rest []string
	for _, id := range saleIDs {
		if !slices.Contains(f.left, id) {
			rest = append(rest, id)
		}
	}
	n, err := f.Engine.PurgeArchived(ctx, rest...)
	if err != nil {
		return n, err
	}
	return n, &inventory.PurgeError{Sales: f.left, Err: f.err}
}

// A purge that fails marks none of its sales archived: they stay
// archiving (their keys gone, never rebuilt) and a later pass purges and
// marks them. A purge that names the sales it may have left keys of
// keeps those only.
func TestPassMarksNoSaleWhosePurgeFailed(t *testing.T) {
	r := realRig(t)
	ids := r.endedSales("fail", 3)
	down := errors.New("redis went away")
	archivedAt := func(id string) bool {
		t.Helper()
		st, err := r.db.Archive(r.ctx, id)
		if err != nil || !st.Archiving() {
			t.Fatalf("sale %s: archive state %+v, %v; want archiving", id, st, err)
		}
		return !st.ArchivedAt.IsZero()
	}

	archived, waiting, err := archive.New(purgeFault{Engine: r.eng, err: down}, r.db, archive.Options{}).Pass(r.ctx)
	if !errors.Is(err, down) || archived != 0 || waiting != len(ids) {
		t.Fatalf("pass with the purge failing: %d archived, %d waiting, %v", archived, waiting, err)
	}
	for _, id := range ids {
		if archivedAt(id) || r.hasSale(id) || r.expiring(id) == 0 {
			t.Fatalf("sale %s after a failed purge: marked %v, keys %s, %d that expire; want unmarked, "+
				"its keys removed but those", id, archivedAt(id), r.state(id), r.expiring(id))
		}
	}
	if done, _, err := archive.New(purgeFault{Engine: r.eng, err: down}, r.db, archive.Options{}).Sale(r.ctx, ids[0]); done || !errors.Is(err, down) || archivedAt(ids[0]) {
		t.Fatalf("Sale with the purge failing: done %v, %v", done, err)
	}

	// The purge of the next pass leaves keys of one sale.
	_, waiting, err = archive.New(purgeFault{Engine: r.eng, err: down, left: ids[:1]}, r.db, archive.Options{}).Pass(r.ctx)
	if !errors.Is(err, down) || waiting != 1 {
		t.Fatalf("pass with the purge failing for %s: %d waiting, %v", ids[0], waiting, err)
	}
	if archivedAt(ids[0]) || !archivedAt(ids[1]) || !archivedAt(ids[2]) {
		t.Fatalf("marked archived: %v %v %v, want the two the purge did", archivedAt(ids[0]), archivedAt(ids[1]), archivedAt(ids[2]))
	}

	if _, waiting, err := archive.New(r.eng, r.db, archive.Options{}).Pass(r.ctx); err != nil || waiting != 0 {
		t.Fatalf("pass with a working purge: %d waiting, %v", waiting, err)
	}
	for _, id := range ids {
		if !archivedAt(id) || r.expiring(id) != 0 {
			t.Fatalf("sale %s: marked %v, %d keys that expire left", id, archivedAt(id), r.expiring(id))
		}
	}
}
