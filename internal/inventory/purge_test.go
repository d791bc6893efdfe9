package inventory_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
)

// PurgeArchived of several sales removes the keys that expire on their own
// of exactly those sales, in one call (on a cluster, some of them share a
// master, in slots of their own): not those of a sale whose id one of
// theirs starts ("s1" and "s10", "s1" and "s1:a"), nor of a live sale, nor
// a key a caller keeps under a purged sale's tag, nor one whose name only
// starts like a family's ("options"). An invalid id removes nothing.
func TestPurgeArchivedRemovesOnlyTheNamedSales(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		expiring := []string{"op:r1", "ptoken:tok", "tat:1000:7", "throttle:1000", "stage:tok:sale"}
		others := []string{"mine", "options", "ptokens", "archived", "sale"}
		var doomed, kept []string
		purge := []string{"s1", "x", "p2", "p3", "p4", "p5"}
		for _, sale := range append([]string{"s10", "s1:a", "live"}, purge...) {
			purged := slices.Contains(purge, sale)
			for _, name := range expiring {
				if purged {
					doomed = append(doomed, r.key(sale, name))
				} else {
					kept = append(kept, r.key(sale, name))
				}
			}
			for _, name := range others {
				kept = append(kept, r.key(sale, name))
			}
		}
		for _, k := range append(slices.Clone(doomed), kept...) {
			if err := r.rdb.Set(r.ctx, k, "v", time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
		}
		left := func() []string {
			got := r.keysOf("{" + r.prefix + ":*")
			slices.Sort(got)
			return got
		}
		all := left()

		if n, err := r.eng.PurgeArchived(r.ctx, "s1", "bad id", "x"); !errors.Is(err, inventory.ErrInvalid) || n != 0 {
			t.Fatalf("purge with an invalid id: %d, %v; want ErrInvalid", n, err)
		}
		if got := left(); !slices.Equal(got, all) {
			t.Fatalf("a purge refused changed the keys: %v, was %v", got, all)
		}

		n, err := r.eng.PurgeArchived(r.ctx, append(purge, "s1")...) // a sale named twice is purged once
		if err != nil || n != len(doomed) {
			t.Fatalf("purge removed %d keys (%v), want %d", n, err, len(doomed))
		}
		want := slices.Clone(kept)
		slices.Sort(want)
		if got := left(); !slices.Equal(got, want) {
			t.Fatalf("keys left: %v\nwant: %v", got, want)
		}
		if n, err := r.eng.PurgeArchived(r.ctx); err != nil || n != 0 {
			t.Fatalf("purge of no sale: %d, %v", n, err)
		}
	})
}

// A node that fails the purge's walk is a PurgeError naming the sales of
// it, which may have keys left.
func TestPurgeArchivedNamesTheSalesAFailedWalkLeft(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	eng := inventory.New(rdb, inventory.Options{Prefix: "p"})
	ctx := context.Background()
	if err := rdb.Set(ctx, eng.Key("a", "op:1"), "v", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	_, err := eng.PurgeArchived(ctx, "a", "b")
	pe, ok := errors.AsType[*inventory.PurgeError](err)
	if !ok || !slices.Equal(pe.Sales, []string{"a", "b"}) || pe.Err == nil {
		t.Fatalf("purge on a node that is down: %v; want a PurgeError naming a and b", err)
	}
}
