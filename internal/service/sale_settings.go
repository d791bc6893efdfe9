package service

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/seckill/seckill/internal/store"
)

// SaleSettings are what the service enforces for a sale beyond the engine's
// definition: purchase tokens, the sale's own rate limits and its waiting
// room. The store keeps them encoded (store.Sale.Settings) without reading
// them.
type SaleSettings struct {
	// RequirePurchaseToken: buys must carry a purchase token.
	RequirePurchaseToken bool `json:"require_purchase_token,omitempty"`
	RateLimits
	// Admission, if set, puts a waiting room in front of the sale's buys
	// (room.go): only admitted buyers buy.
	Admission *AdmissionSettings `json:"admission,omitempty"`
}

// RateLimits are a sale's own rate limits, each a ratelimit.ParseLimit
// spec ("5/s,burst=10") or "off"; "" means the service's default.
type RateLimits struct {
	PerUser string `json:"per_user,omitempty"`
	PerIP   string `json:"per_ip,omitempty"`
	PerSale string `json:"per_sale,omitempty"`
}

// encode is the value the store keeps: "" when nothing is set, else a
// JSON object (the keys of a sale's rate limits as stored before the
// settings had one column, so those rows still decode).
func (st SaleSettings) encode() string {
	if st == (SaleSettings{}) {
		return ""
	}
	b, _ := json.Marshal(st)
	return string(b)
}

// decodeSaleSettings decodes the column as encode writes it: "" for none,
// else one JSON object of known keys that sets something. Anything else
// (null, {}, an unknown or misspelt key, data after the object) is an
// error: settings read as less than was written would drop a defence (a
// purchase token, a sale's own rate limit) without a word.
func decodeSaleSettings(s string) (SaleSettings, error) {
	var st SaleSettings
	if s == "" {
		return st, nil
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return SaleSettings{}, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return SaleSettings{}, errors.New("data after the settings object")
	}
	if st == (SaleSettings{}) {
		return SaleSettings{}, fmt.Errorf("%q sets nothing (no settings are stored as \"\")", s)
	}
	return st, nil
}

// settingsOf decodes a stored sale's settings and checks its rate limits
// and its room as at its creation: a limit that does not parse would
// otherwise be read as the service's default (or none).
func settingsOf(sale store.Sale) (SaleSettings, error) {
	st, err := decodeSaleSettings(sale.Settings)
	if err != nil {
		// %v: a column of blanks fails with io.EOF, which would read as a
		// Redis that did not answer (503, retry) instead of a corrupt row.
		return SaleSettings{}, fmt.Errorf("settings of sale %s: %v", sale.ID, err)
	}
	for _, c := range []struct{ field, spec string }{{"per_user", st.PerUser}, {"per_ip", st.PerIP}, {"per_sale", st.PerSale}} {
		if _, err := parseLimitSpec(c.spec); c.spec != "" && err != nil {
			return SaleSettings{}, fmt.Errorf("settings of sale %s: rate limit %s %q: %v", sale.ID, c.field, c.spec, err)
		}
	}
	if st.Admission != nil {
		if err := checkAdmission(sale.Sale, *st.Admission); err != nil {
			return SaleSettings{}, fmt.Errorf("settings of sale %s: %v", sale.ID, err)
		}
	}
	return st, nil
}
