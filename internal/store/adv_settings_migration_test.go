package store

import "testing"

// TestAdvSaleSettingsMigrationOfOddRows: rate_limits columns the code before
// migration 009 read as "no limits" without writing them ('{}', blanks,
// an object followed by a blank) come out of 009 as what the service reads:
// "" or an object, with the purchase-token flag kept. Before, '{}' with the
// flag became '{,"require_purchase_token":true}' (not JSON: the sale could
// not be bought), and '{}' without it stayed '{}'.
func TestAdvSaleSettingsMigrationOfOddRows(t *testing.T) {
	migrateSettingsRows(t, []oldSettingsRow{
		{"empty-token", `{}`, 1, `{"require_purchase_token":true}`},
		{"empty", `{}`, 0, ""},
		{"blank-token", ` `, 1, `{"require_purchase_token":true}`},
		{"trailing-token", `{"per_ip":"off"} `, 1, `{"per_ip":"off","require_purchase_token":true}`},
	})
}
