package archive_test

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/archive"
	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/faultnet"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/pipeline"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/store"
	"github.com/seckill/seckill/internal/waitfor"
)

// A consumer that cannot reach the database keeps reading the sales it
// knew, among them one archived meanwhile (by an instance that can): its
// sweeps of ended sales find the stream gone. The archived sale's keys
// never come back, neither while the database is away nor once it is back
// and a long while has passed (no archiver sweep removes them here: an
// outage may outlast its window).
func TestArchivedSaleStaysGoneWhileTheConsumerCannotReachTheDatabase(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Standalone(t)
	direct := dbtest.PostgresURL(t)
	r := newRig(t, rdb, redistest.Prefix(t, rdb), direct)

	// The consumer's database, through a proxy the test cuts.
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	proxy := faultnet.Start(t, u.Host)
	u.Host = proxy.Addr()
	q := u.Query()
	q.Set("connect_timeout", "1")
	u.RawQuery = q.Encode()
	cdb, err := store.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cdb.Close() })
	// The consumer's own Redis client, counting its commands on each stream.
	crdb := redis.NewClient(rdb.Options())
	t.Cleanup(func() { _ = crdb.Close() })
	seen := &streamCommands{n: map[string]int{}}
	crdb.AddHook(seen)

	gone, live := r.eng.EventsKey("gone"), r.eng.EventsKey("live")
	r.saleUntil("gone", 5, time.Now().Add(time.Second))
	r.sale("live", 1) // never ends: the consumer's rounds go on

	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	c := pipeline.New(crdb, r.eng, cdb, pipeline.Options{Name: "cut-off", Block: 20 * time.Millisecond,
		DiscoverAll: 20 * time.Millisecond, ClaimEvery: 50 * time.Millisecond, IdleSweep: 30 * time.Millisecond,
		MaxBackoff: 100 * time.Millisecond})
	go func() {
		defer close(done)
		_ = c.Run(cctx)
	}()
	t.Cleanup(func() { cancel(); <-done })

	waitfor.Until(t, waitfor.Patience, "the sale to end with its orders stored", func() error {
		chk, err := r.eng.CheckArchive(ctx, "gone")
		if err != nil || !chk.Ready {
			return fmt.Errorf("check %+v, %v", chk, err)
		}
		if n := r.confirmed("gone"); n != 5 {
			return fmt.Errorf("%d orders stored", n)
		}
		return nil
	})

	proxy.Cut() // the consumer's database is away from here on
	arch := archive.New(r.eng, r.db, archive.Options{})
	waitfor.Until(t, waitfor.Patience, "the sale to be archived", func() error {
		if _, _, err := arch.Pass(ctx); err != nil {
			return err
		}
		if st, err := r.db.Archive(ctx, "gone"); err != nil || st.ArchivedAt.IsZero() {
			return fmt.Errorf("archive state %+v, %v: %s", st, err, r.state("gone"))
		}
		return nil
	})
	if r.hasSale("gone") {
		t.Fatalf("archived, keys left: %s", r.state("gone"))
	}

	// The consumer's sweeps look at the archived sale's stream again and again.
	base := seen.of(gone)
	waitfor.Until(t, waitfor.Patience, "the consumer to look at the archived sale's stream again", func() error {
		if n := seen.of(gone); n < base+6 {
			return fmt.Errorf("%d commands on its stream since it was archived", n-base)
		}
		return nil
	})
	if keys := saleKeys(t, r, "gone"); len(keys) > 0 {
		t.Fatalf("while the consumer cannot reach the database, an archived sale's keys are back: %v", keys)
	}

	// The database is back: the consumer learns the sale is archived; a long
	// while later (many sweeps) nothing of it is in Redis still.
	proxy.Restore()
	if _, err := r.eng.Buy(ctx, "live", "later", []inventory.Line{{SKU: "A", Qty: 1}}, ""); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, waitfor.Patience, "the consumer to store an order again", func() error {
		if n := r.confirmed("live"); n != 2 {
			return fmt.Errorf("%d orders of the live sale stored", n)
		}
		return nil
	})
	rounds := seen.of(live)
	waitfor.Until(t, waitfor.Patience, "many rounds of the consumer", func() error {
		if n := seen.of(live); n < rounds+50 {
			return fmt.Errorf("%d commands on the live sale's stream", n-rounds)
		}
		return nil
	})
	if slices.Contains(c.Live(), "gone") {
		t.Error("the consumer still reads the archived sale with the database back")
	}
	if keys := saleKeys(t, r, "gone"); len(keys) > 0 {
		t.Fatalf("after the outage, an archived sale's keys are back: %v", keys)
	}
}

// saleKeys lists every key of the sale in Redis (SCAN of its hash tag)
// but the archived mark, which expires on its own.
func saleKeys(t *testing.T, r *rig, saleID string) []string {
	t.Helper()
	var keys []string
	iter := r.rdb.Scan(r.ctx, 0, r.eng.Key(saleID, "*"), 1000).Iterator()
	for iter.Next(r.ctx) {
		if iter.Val() != r.eng.Key(saleID, "archived") {
			keys = append(keys, iter.Val())
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// streamCommands counts the commands a client sends naming each key.
type streamCommands struct {
	mu sync.Mutex
	n  map[string]int
}

func (s *streamCommands) of(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[key]
}

func (s *streamCommands) count(cmds ...redis.Cmder) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range cmds {
		for _, a := range c.Args() {
			if k, ok := a.(string); ok {
				s.n[k]++
			}
		}
	}
}

func (s *streamCommands) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *streamCommands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.count(cmd)
		return next(ctx, cmd)
	}
}

func (s *streamCommands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		s.count(cmds...)
		return next(ctx, cmds)
	}
}
