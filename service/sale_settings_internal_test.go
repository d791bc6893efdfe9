package service

import (
	"testing"
	"unicode/utf8"
)

// FuzzSaleSettingsColumn (was store's FuzzRateLimitsColumn): the sale's
// settings column holds "" for no settings or the JSON of them. Whatever it holds decodes or fails without a panic; a
// decoded value encodes to a column that decodes to it again; and every
// RateLimits of valid UTF-8 round-trips exactly, "" only when empty.
func FuzzSaleSettingsColumn(f *testing.F) {
	f.Add(`{"per_user":"5/s,burst=10","per_ip":"off"}`, "5/s,burst=10", "off", "")
	f.Add(``, "", "", "")
	f.Add(`{"per_sale":"2000/s","x":1}`, "", "", "2000/s")
	f.Add(`null`, `"quoted"`, "back\\slash", "<tag>&")
	f.Add(`{"per_user":5}`, "é", "\u2028", "")
	f.Add(`[`, "", "x", "")
	f.Fuzz(func(t *testing.T, column, perUser, perIP, perSale string) {
		if r, err := decodeSaleSettings(column); err == nil {
			if back, err := decodeSaleSettings(r.encode()); err != nil || back != r {
				t.Fatalf("column %q decoded as %+v, encoded as %q, decoded again as %+v, %v", column, r, r.encode(), back, err)
			}
		}
		if !utf8.ValidString(perUser) || !utf8.ValidString(perIP) || !utf8.ValidString(perSale) {
			return // the service decodes JSON bodies into valid UTF-8 only
		}
		r := SaleSettings{RateLimits: RateLimits{PerUser: perUser, PerIP: perIP, PerSale: perSale}}
		col := r.encode()
		if (col == "") != (r == SaleSettings{}) {
			t.Fatalf("%+v encoded as %q", r, col)
		}
		if back, err := decodeSaleSettings(col); err != nil || back != r {
			t.Fatalf("%+v encoded as %q decodes as %+v, %v", r, col, back, err)
		}
	})
}

// TestSaleSettingsOfOldRows: the settings column of a sale stored before
// the settings had one column (rate limits only; migration 009 appends the
// purchase-token flag) decodes to what the sale had.
func TestSaleSettingsOfOldRows(t *testing.T) {
	for col, want := range map[string]SaleSettings{
		`{"per_user":"2/s,burst=3","per_sale":"off","require_purchase_token":true}`: {RequirePurchaseToken: true,
			RateLimits: RateLimits{PerUser: "2/s,burst=3", PerSale: "off"}},
		`{"require_purchase_token":true}`: {RequirePurchaseToken: true},
		`{"per_ip":"off"}`:                {RateLimits: RateLimits{PerIP: "off"}},
		``:                                {},
	} {
		if got, err := decodeSaleSettings(col); err != nil || got != want {
			t.Errorf("settings %q decode as %+v, %v; want %+v", col, got, err, want)
		}
	}
}
