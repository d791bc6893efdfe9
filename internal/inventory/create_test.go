package inventory_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// TestCreateSalesAllOrNothing: three sales created as one. A key of the
// wrong type in the way of the third, or a commit that fails, and the
// ones the call created are gone again, with their streams; the key in
// the way stays. Then the same call succeeds.
func TestCreateSalesAllOrNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		r := newRig(t, be, inventory.Options{})
		sales := []inventory.Sale{
			{ID: "c:0", PerUserLimit: 2, Items: []inventory.Item{{SKU: "A", Stock: 4}}},
			{ID: "c:1", PerUserLimit: 2, Items: []inventory.Item{{SKU: "A", Stock: 3}}},
			{ID: "c:2", PerUserLimit: 2, Items: []inventory.Item{{SKU: "A", Stock: 3}}},
		}
		ours := func() []string {
			var keys []string
			for _, s := range sales {
				keys = append(keys, r.keysOf("{"+r.prefix+":"+s.ID+"}:*")...)
			}
			return keys
		}
		obstacle := r.key("c:2", "sale")
		if err := r.rdb.Set(r.ctx, obstacle, "in the way", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := r.eng.CreateSales(r.ctx, sales, nil); err == nil {
			t.Fatal("CreateSales with a key in the way succeeded")
		}
		if keys := ours(); !slices.Equal(keys, []string{obstacle}) {
			t.Errorf("a failed CreateSales left %v", keys)
		}
		if err := r.rdb.Del(r.ctx, obstacle).Err(); err != nil {
			t.Fatal(err)
		}
		refused := errors.New("the system of record refused")
		committed := 0
		if _, err := r.eng.CreateSales(r.ctx, sales, func(context.Context) error { committed++; return refused }); !errors.Is(err, refused) || committed != 1 {
			t.Fatalf("CreateSales whose commit failed: %v (%d commits)", err, committed)
		}
		if keys := ours(); len(keys) != 0 {
			t.Errorf("CreateSales whose commit failed left %v", keys)
		}
		if existed, err := r.eng.CreateSales(r.ctx, sales, nil); err != nil || existed != 0 {
			t.Fatalf("CreateSales: %d, %v", existed, err)
		}
		for _, s := range sales {
			if st, err := r.eng.Stock(r.ctx, s.ID); err != nil || st.Items[0].Remaining != s.Items[0].Stock {
				t.Errorf("sale %s: %+v, %v", s.ID, st, err)
			}
		}
	})
}

// TestCreateSalesTakesOnlyTheSameSale: a create died after its first sale.
// A CreateSales of the same sales takes that one over (it is exactly what
// the call would make, untouched) and makes the rest; one that differs in
// any field create writes is refused, changes nothing, and leaves nothing
// of its own; so is one over a sale something happened to. A commit that
// fails then removes only what the call made.
func TestCreateSalesTakesOnlyTheSameSale(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		r := newRig(t, be, inventory.Options{})
		base := inventory.Sale{ID: "c:0", PerUserLimit: 2, PaymentTimeout: time.Minute,
			StartsAt: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), EndsAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
			Items: []inventory.Item{{SKU: "A", Stock: 4}, {SKU: "U", Stock: inventory.Unlimited}}}
		second := base
		second.ID = "c:1"
		r.create(base) // the create that died
		before, err := r.rdb.HGetAll(r.ctx, r.key("c:0", "sale")).Result()
		if err != nil {
			t.Fatal(err)
		}
		variants := map[string]func(s *inventory.Sale){
			"no payment timeout": func(s *inventory.Sale) { s.PaymentTimeout = 0 },
			"another stock": func(s *inventory.Sale) {
				s.Items = []inventory.Item{{SKU: "A", Stock: 40}, {SKU: "U", Stock: inventory.Unlimited}}
			},
			"another limit": func(s *inventory.Sale) { s.PerUserLimit = 3 },
			"another start": func(s *inventory.Sale) { s.StartsAt = s.StartsAt.Add(time.Second) },
			"another end":   func(s *inventory.Sale) { s.EndsAt = time.Time{} },
			"paused":        func(s *inventory.Sale) { s.Paused = true },
			"items in another order": func(s *inventory.Sale) {
				s.Items = []inventory.Item{{SKU: "U", Stock: inventory.Unlimited}, {SKU: "A", Stock: 4}}
			},
			"one item less": func(s *inventory.Sale) { s.Items = s.Items[:1] },
		}
		for name, change := range variants {
			a, b := base, second
			a.Items, b.Items = slices.Clone(base.Items), slices.Clone(second.Items)
			change(&a)
			change(&b)
			if _, err := r.eng.CreateSales(r.ctx, []inventory.Sale{a, b}, nil); !errors.Is(err, inventory.ErrExists) {
				t.Errorf("%s: %v, want ErrExists", name, err)
			}
			if after, _ := r.rdb.HGetAll(r.ctx, r.key("c:0", "sale")).Result(); !sameFields(before, after) {
				t.Errorf("%s changed the sale there: %v", name, after)
			}
			if keys := r.keysOf("{" + r.prefix + ":c:1}:*"); len(keys) != 0 {
				t.Errorf("%s left %v", name, keys)
			}
		}

		// The same sales: the first is taken, the second made; a commit
		// that fails removes the second only.
		refused := errors.New("refused")
		if _, err := r.eng.CreateSales(r.ctx, []inventory.Sale{base, second}, func(context.Context) error { return refused }); !errors.Is(err, refused) {
			t.Fatalf("CreateSales whose commit failed: %v", err)
		}
		if after, _ := r.rdb.HGetAll(r.ctx, r.key("c:0", "sale")).Result(); !sameFields(before, after) {
			t.Errorf("the sale taken over was changed or removed: %v", after)
		}
		if keys := r.keysOf("{" + r.prefix + ":c:1}:*"); len(keys) != 0 {
			t.Errorf("the sale made was left: %v", keys)
		}
		if existed, err := r.eng.CreateSales(r.ctx, []inventory.Sale{base, second}, nil); err != nil || existed != 1 {
			t.Fatalf("CreateSales of the same sales: %d, %v", existed, err)
		}

		// Something happened to it: it is nobody's to take over any more.
		if _, err := r.eng.Buy(r.ctx, "c:0", "u1", lines("A", 1), ""); err != nil {
			t.Fatal(err)
		}
		third := base
		third.ID = "c:2"
		if _, err := r.eng.CreateSales(r.ctx, []inventory.Sale{base, third}, nil); !errors.Is(err, inventory.ErrExists) {
			t.Errorf("CreateSales over a sale bought from: %v", err)
		}
		if keys := r.keysOf("{" + r.prefix + ":c:2}:*"); len(keys) != 0 {
			t.Errorf("a refused CreateSales left %v", keys)
		}
	})
}

// TestCreateSalesKeepsWhatWasUsedMeanwhile: a sale the call made was
// bought from before the commit failed. It is not removed (nothing
// anybody did is undone), and the error says it was left.
func TestCreateSalesKeepsWhatWasUsedMeanwhile(t *testing.T) {
	r := newRig(t, backends[0], inventory.Options{})
	sale := inventory.Sale{ID: "c:0", PerUserLimit: 2, Items: []inventory.Item{{SKU: "A", Stock: 4}}}
	refused := errors.New("refused")
	_, err := r.eng.CreateSales(r.ctx, []inventory.Sale{sale}, func(ctx context.Context) error {
		if _, err := r.eng.Buy(ctx, "c:0", "u1", lines("A", 1), ""); err != nil {
			t.Fatal(err)
		}
		return refused
	})
	if !errors.Is(err, refused) || err.Error() == refused.Error() {
		t.Fatalf("CreateSales whose sale was used before its commit failed: %v", err)
	}
	if rem := r.remaining("c:0")["A"]; rem != 3 {
		t.Errorf("the sale used meanwhile reads %d remaining, want 3", rem)
	}
}

func sameFields(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
