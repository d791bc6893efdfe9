package store

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

func TestRepairJournal(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		got, err := s.Repairs(ctx, "")
		must(t, err)
		check(t, "repairs of a new database", len(got), 0)

		at := time.UnixMilli(1_795_000_000_123).UTC()
		must(t, s.JournalRepair(ctx, inventory.Repaired{SaleID: "s1", Changes: []inventory.RepairChange{
			{Field: inventory.RepairPaused, Before: 1, After: 0, Fixed: 1},
			{SKU: "A", Field: inventory.RepairRemaining, Before: 12, After: 9, Fixed: 1},
			{SKU: "A", Field: inventory.RepairSold, Before: 5, After: 6, Fixed: 1},
		}}, "drift -1, stock drift 3", at))
		must(t, s.JournalRepair(ctx, inventory.Repaired{SaleID: "s2", Changes: []inventory.RepairChange{
			{SKU: "B", Field: inventory.RepairHeld, Before: 3, After: 1, Fixed: 2},
		}}, "held drift 2", time.Time{}))
		must(t, s.JournalRepair(ctx, inventory.Repaired{SaleID: "s1"}, "nothing", at)) // no changes: no rows

		got, err = s.Repairs(ctx, "s1")
		must(t, err)
		check(t, "repairs of s1", got, []RepairEntry{
			{SaleID: "s1", Field: "paused", Before: 1, After: 0, Fixed: 1, Reason: "drift -1, stock drift 3", At: at},
			{SaleID: "s1", SKU: "A", Field: "remaining", Before: 12, After: 9, Fixed: 1, Reason: "drift -1, stock drift 3", At: at},
			{SaleID: "s1", SKU: "A", Field: "sold", Before: 5, After: 6, Fixed: 1, Reason: "drift -1, stock drift 3", At: at},
		})
		all, err := s.Repairs(ctx, "")
		must(t, err)
		if len(all) != 4 || all[3].SaleID != "s2" || all[3].Fixed != 2 || time.Since(all[3].At) > time.Minute {
			t.Errorf("all repairs: %+v", all)
		}

		// A repair of a big sale: more rows than one statement may carry.
		big := inventory.Repaired{SaleID: "big"}
		for i := range 5000 {
			big.Changes = append(big.Changes, inventory.RepairChange{SKU: "k" + strconv.Itoa(i), Field: inventory.RepairHeld, Before: int64(i), After: 0, Fixed: 1})
		}
		must(t, s.JournalRepair(ctx, big, "lost", at))
		got, err = s.Repairs(ctx, "big")
		must(t, err)
		if len(got) != 5000 || got[4999].SKU != "k4999" || got[4999].Before != 4999 {
			t.Errorf("%d rows of the big repair, last %+v", len(got), got[len(got)-1])
		}
	})
}
