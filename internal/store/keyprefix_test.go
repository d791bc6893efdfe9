package store

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
)

// TestClaimKeyPrefix: the first prefix claimed stays the database's; the
// same prefix claims it again, another is refused with a one-line error
// naming the database and both prefixes, and a check leaves a database
// that belongs to no prefix unclaimed.
func TestClaimKeyPrefix(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		must(t, s.CheckKeyPrefix(ctx, "shop"))
		owner, err := s.KeyPrefix(ctx)
		must(t, err)
		check(t, "owner after a check", owner, "")

		must(t, s.ClaimKeyPrefix(ctx, "shop"))
		must(t, s.ClaimKeyPrefix(ctx, "shop"))
		must(t, s.CheckKeyPrefix(ctx, "shop"))
		for _, refuse := range []func(context.Context, string) error{s.ClaimKeyPrefix, s.CheckKeyPrefix} {
			err := refuse(ctx, "seckill")
			var kp *KeyPrefixError
			if !errors.As(err, &kp) || kp.Owner != "shop" || kp.Prefix != "seckill" {
				t.Fatalf("prefix seckill on shop's database: %v, want a KeyPrefixError", err)
			}
			where := `schema "`
			if s.Dialect() == SQLite {
				where = `SQLite file "`
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "the database ("+where) || !strings.Contains(msg, `belongs to key prefix "shop"; this instance's is "seckill"`) ||
				strings.Contains(msg, "\n") {
				t.Errorf("refusal: %q", msg)
			}
		}
		owner, err = s.KeyPrefix(ctx)
		must(t, err)
		check(t, "owner", owner, "shop")
	})
}

// TestClaimKeyPrefixRace: stores of several prefixes claim one database at
// once; exactly one prefix wins, and every store of another is refused.
func TestClaimKeyPrefixRace(t *testing.T) {
	t.Parallel()
	for _, d := range dbtest.Dialects(t) {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			openStore(t, d.URL) // migrated once, so the claims meet at the row
			const n = 6
			stores := make([]*Store, n)
			for i := range stores {
				stores[i] = openStore(t, d.URL)
			}
			errs := make([]error, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i, s := range stores {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					errs[i] = s.ClaimKeyPrefix(context.Background(), "p"+string(rune('a'+i)))
				}()
			}
			close(start)
			wg.Wait()
			owner, err := stores[0].KeyPrefix(context.Background())
			must(t, err)
			won := 0
			for i, err := range errs {
				var kp *KeyPrefixError
				switch {
				case err == nil:
					won++
					if p := "p" + string(rune('a'+i)); p != owner {
						t.Errorf("claim of %s succeeded, the database belongs to %s", p, owner)
					}
				case !errors.As(err, &kp) || kp.Owner != owner:
					t.Errorf("claim %d: %v, want a refusal naming %s", i, err, owner)
				}
			}
			if won != 1 {
				t.Fatalf("%d claims won (%v), want exactly one", won, errs)
			}
		})
	}
}

// TestKeyPrefixOfOlderDatabase: a database an older release wrote (its
// migrations before 019, a sale) belongs to no prefix after the upgrade,
// and to the first one claimed then.
func TestKeyPrefixOfOlderDatabase(t *testing.T) {
	t.Parallel()
	for _, d := range dbtest.Dialects(t) {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, _ := openMigratedBelow(t, d.Name, d.URL, 19)
			_, err := s.exec(ctx, s.db, "INSERT INTO sales (id, per_user_limit, settings, created_at) VALUES ('old', 1, '', 1)")
			must(t, err)
			must(t, s.migrate(ctx))
			owner, err := s.KeyPrefix(ctx)
			must(t, err)
			check(t, "owner after the upgrade", owner, "")
			must(t, s.ClaimKeyPrefix(ctx, "shop"))
			var kp *KeyPrefixError
			if err := s.ClaimKeyPrefix(ctx, "seckill"); !errors.As(err, &kp) {
				t.Fatalf("another prefix after the adoption: %v", err)
			}
			sale, err := s.Sale(ctx, "old")
			must(t, err)
			check(t, "the old sale", sale.Sale, inventory.Sale{ID: "old", PerUserLimit: 1})
		})
	}
}
