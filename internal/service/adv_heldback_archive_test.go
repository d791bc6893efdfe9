package service_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/waitfor"
)

// TestArchiverWaitsWhileRedisIsHeldBack: Redis restarts (a new run id) and
// the seller holds it back until a recovery repairs it; meanwhile a sale
// ends there and its stream drains into the database. The archiver must
// not remove the sale's keys before the recovery: a Redis that restarted
// may have lost orders it acknowledged (the tail of its AOF) that only the
// instances' acks hold, and the recovery hands them to the database first.
// Archived before that, the sale would take them in afterwards (AdoptOrders)
// with no keys left in Redis to expire or pay them: held units, unsettled
// for good. (The archiver ran with the background work's AllowedToDial
// and looked at nothing but the data.)
//
// No tick runs after Start (DegradedTick 1h), so Redis stays held back for
// the whole test; the archiver's log tells each pass it paused.
func TestArchiverWaitsWhileRedisIsHeldBack(t *testing.T) {
	ctx := context.Background()
	srv := redistest.StartServer(t, "--appendonly", "yes", "--appendfsync", "always")
	logs := &syncBuffer{}
	cfg := degradedConfig(srv.Addr())
	cfg.DatabaseURL = dbtest.PostgresURL(t)
	cfg.DegradedTick, cfg.DegradedGrace = time.Hour, time.Hour
	cfg.ArchiveEvery = 20 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a := startApp(t, cfg)
	a.createSale("s1", 1, "A", int64(5))
	if r := a.call("POST", "/v1/sales/s1/orders", a.token("u1"), map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}}); r.status != http.StatusCreated {
		t.Fatalf("buy: %d %s", r.status, r.body)
	}
	a.settle("s1")

	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// The sale ends on the restarted Redis, through a client of its own
	// (the service's refuses the API's work now), and in the database.
	raw := srv.Client(t)
	eng := inventory.New(raw, inventory.Options{Prefix: "seckill"})
	_, end, err := eng.Close(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.svc.Store().CloseSale(ctx, "s1", end); err != nil {
		t.Fatal(err)
	}
	// The consumer (allowed on a held-back Redis) drains the closed event:
	// from then on nothing but the hold-back keeps the sale from archiving.
	waitfor.Until(t, waitfor.Patience, "the closed event stored", func() error {
		if n, err := raw.XLen(ctx, eng.EventsKey("s1")).Result(); err != nil || n != 0 {
			return fmt.Errorf("stream: %d entries, %v", n, err)
		}
		return nil
	})
	if a.sellMode()["mode"] != "redis" {
		t.Fatalf("mode %v; want redis (held back by this instance only)", a.sellMode())
	}
	paused := strings.Count(logs.String(), pausedLog)
	waitfor.Until(t, waitfor.Patience, "an archiver pass after the drain", func() error {
		st, err := a.svc.Store().Archive(ctx, "s1")
		if err != nil || st.Archiving() || strings.Count(logs.String(), pausedLog) >= paused+2 {
			return nil
		}
		return errors.New("no pass yet")
	})
	st, err := a.svc.Store().Archive(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if st.Archiving() {
		t.Fatalf("sale archived (%+v) while the seller held Redis back after its restart", st)
	}
	if n, err := raw.Exists(ctx, eng.Key("s1", "sale")).Result(); err != nil || n != 1 {
		t.Errorf("the sale's hash: exists %d, %v; want kept until the recovery", n, err)
	}
}

// pausedLog is what the archiver logs for a pass it skips.
const pausedLog = "archiver: paused"
