package store

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/seckill/seckill/internal/dbtest"
)

// TestSaleSettingsMigration: sales stored before the service's settings had
// one column (a purchase-token flag of its own, the rate limits' JSON in
// rate_limits) read back, after migration 009, with both in Settings: the
// rate limits' keys as they were, the flag as "require_purchase_token".
func TestSaleSettingsMigration(t *testing.T) {
	t.Parallel()
	for _, d := range dbtest.Dialects(t) {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			var s *Store
			var err error
			if d.Name == SQLite {
				s, err = openSQLite(strings.TrimPrefix(d.URL, "sqlite://"))
			} else {
				s, err = openPostgres(d.URL)
			}
			must(t, err)
			t.Cleanup(func() { s.Close() })
			ms, err := migrations(s.dialect)
			must(t, err)
			for _, m := range ms {
				if m.version >= 9 {
					break
				}
				must(t, s.inTx(ctx, nil, func(tx *sql.Tx) error { return s.applyMigration(ctx, tx, m) }))
			}
			for _, row := range []struct {
				id, limits string
				token      int
			}{{"both", `{"per_user":"2/s,burst=3","per_sale":"off"}`, 1}, {"token", "", 1}, {"limits", `{"per_ip":"off"}`, 0}, {"none", "", 0}} {
				_, err := s.exec(ctx, s.db, `INSERT INTO sales (id, per_user_limit, require_purchase_token, rate_limits, created_at)
					VALUES (?, 1, ?, ?, 1)`, row.id, row.token, row.limits)
				must(t, err)
			}
			must(t, s.migrate(ctx))
			for id, want := range map[string]string{
				"both":   `{"per_user":"2/s,burst=3","per_sale":"off","require_purchase_token":true}`,
				"token":  `{"require_purchase_token":true}`,
				"limits": `{"per_ip":"off"}`,
				"none":   "",
			} {
				sale, err := s.Sale(ctx, id)
				must(t, err)
				check(t, "settings of "+id, sale.Settings, want)
			}
		})
	}
}
