package service

import (
	"testing"
	"unicode/utf8"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/store"
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

// TestAdvSaleSettingsCorruptColumnIsAnError: a settings column that does
// not say what the service wrote — JSON null, a key the service does not
// know (a misspelt or renamed defence), a rate limit that does not parse,
// data after the object, a top level that is not an object — is an error,
// never settings with a defence silently dropped (no purchase token, the
// service's default limit or none where the sale had its own).
func TestAdvSaleSettingsCorruptColumnIsAnError(t *testing.T) {
	for _, col := range []string{
		`null`,
		`{}`,
		`{"requirePurchaseToken":true}`,
		`{"per_user":"2/s","rate_limits":{"per_ip":"1/s"}}`,
		`{"per_user":"garbage"}`,
		`{"per_sale":"-5/s"}`,
		`{"per_user":"2/s"} {"require_purchase_token":true}`,
		`{"require_purchase_token":true}x`,
		`"require_purchase_token"`,
		`{,"require_purchase_token":true}`,
		` `,
	} {
		sale := store.Sale{Sale: inventory.Sale{ID: "s1"}, Settings: col}
		if got, err := settingsOf(sale); err == nil {
			t.Errorf("settings column %q decodes as %+v, want an error", col, got)
		} else if api := toAPI(err); api != errInternal {
			t.Errorf("settings column %q: %v answers %+v, want an internal error (not the buyer's)", col, err, api)
		}
	}
}
