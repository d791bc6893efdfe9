package service

import (
	"context"
	"strconv"
	"testing"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/store"
	"github.com/seckill/seckill/internal/ttlcache"
)

// TestSettingsCacheBounded: requests for sale after sale keep at most the
// cache's bound of settings in memory, and a sale whose settings were
// dropped is read again from the database, right.
func TestSettingsCacheBounded(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(ctx, dbtest.SQLiteURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	const bound, sales = 8, 40
	s := &Service{db: db, saleCache: ttlcache.New[saleSettings](bound)}
	for i := range sales {
		sale := store.Sale{Sale: inventory.Sale{ID: "s" + strconv.Itoa(i), PerUserLimit: 1,
			Items: []inventory.Item{{SKU: "A", Stock: 1}}}, Settings: SaleSettings{RequirePurchaseToken: i%2 == 1}.encode()}
		if err := db.CreateSale(ctx, sale); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 2 {
		for i := range sales {
			got, err := s.settings(ctx, "s"+strconv.Itoa(i))
			if err != nil || got.ID != "s"+strconv.Itoa(i) || got.RequirePurchaseToken != (i%2 == 1) {
				t.Fatalf("round %d: settings(s%d) = %+v, %v", round, i, got.Sale, err)
			}
			if n := s.saleCache.Len(); n > bound {
				t.Fatalf("round %d, sale %d: %d sales cached, bound %d", round, i, n, bound)
			}
		}
	}
}
