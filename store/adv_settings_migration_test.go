package store

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/seckill/seckill/internal/dbtest"
)

// TestAdvSaleSettingsMigrationOfOddRows: rate_limits columns the code before
// migration 009 read as "no limits" without writing them ('{}', blanks,
// an object followed by a blank) come out of 009 as what the service reads:
// "" or an object, with the purchase-token flag kept. Before, '{}' with the
// flag became '{,"require_purchase_token":true}' (not JSON: the sale could
// not be bought), and '{}' without it stayed '{}'.
func TestAdvSaleSettingsMigrationOfOddRows(t *testing.T) {
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
			}{{"empty-token", `{}`, 1}, {"empty", `{}`, 0}, {"blank-token", ` `, 1}, {"trailing-token", `{"per_ip":"off"} `, 1}} {
				_, err := s.exec(ctx, s.db, `INSERT INTO sales (id, per_user_limit, require_purchase_token, rate_limits, created_at)
					VALUES (?, 1, ?, ?, 1)`, row.id, row.token, row.limits)
				must(t, err)
			}
			must(t, s.migrate(ctx))
			for id, want := range map[string]string{
				"empty-token":    `{"require_purchase_token":true}`,
				"empty":          "",
				"blank-token":    `{"require_purchase_token":true}`,
				"trailing-token": `{"per_ip":"off","require_purchase_token":true}`,
			} {
				sale, err := s.Sale(ctx, id)
				must(t, err)
				check(t, "settings of "+id, sale.Settings, want)
			}
		})
	}
}
