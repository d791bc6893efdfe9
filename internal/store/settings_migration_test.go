package store

import (
	"context"
	"testing"

	"github.com/seckill/seckill/internal/dbtest"
)

// TestSaleSettingsMigration: sales stored before the service's settings had
// one column (a purchase-token flag of its own, the rate limits' JSON in
// rate_limits) read back, after migration 009, with both in Settings: the
// rate limits' keys as they were, the flag as "require_purchase_token".
func TestSaleSettingsMigration(t *testing.T) {
	migrateSettingsRows(t, []oldSettingsRow{
		{"both", `{"per_user":"2/s,burst=3","per_sale":"off"}`, 1, `{"per_user":"2/s,burst=3","per_sale":"off","require_purchase_token":true}`},
		{"token", "", 1, `{"require_purchase_token":true}`},
		{"limits", `{"per_ip":"off"}`, 0, `{"per_ip":"off"}`},
		{"none", "", 0, ""},
	})
}

// oldSettingsRow is a sale row as stored before migration 009 (its
// rate_limits column and purchase-token flag) and the settings it must
// read back with after it.
type oldSettingsRow struct {
	id, limits string
	token      int
	want       string
}

// migrateSettingsRows migrates a fresh database of each dialect up to 008,
// stores rows there, runs the rest of the migrations and checks each row's
// Settings.
func migrateSettingsRows(t *testing.T, rows []oldSettingsRow) {
	t.Parallel()
	for _, d := range dbtest.Dialects(t) {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, _ := openMigratedBelow(t, d.Name, d.URL, 9)
			for _, row := range rows {
				_, err := s.exec(ctx, s.db, `INSERT INTO sales (id, per_user_limit, require_purchase_token, rate_limits, created_at)
					VALUES (?, 1, ?, ?, 1)`, row.id, row.token, row.limits)
				must(t, err)
			}
			must(t, s.migrate(ctx))
			for _, row := range rows {
				sale, err := s.Sale(ctx, row.id)
				must(t, err)
				check(t, "settings of "+row.id, sale.Settings, row.want)
			}
		})
	}
}
