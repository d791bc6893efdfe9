package service

import (
	"encoding/json"
	"fmt"

	"github.com/seckill/seckill/store"
)

// SaleSettings are what the service enforces for a sale beyond the engine's
// definition: purchase tokens and the sale's own rate limits. The store
// keeps them encoded (store.Sale.Settings) without reading them.
type SaleSettings struct {
	// RequirePurchaseToken: buys must carry a purchase token.
	RequirePurchaseToken bool `json:"require_purchase_token,omitempty"`
	RateLimits
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

func decodeSaleSettings(s string) (SaleSettings, error) {
	var st SaleSettings
	if s == "" {
		return st, nil
	}
	err := json.Unmarshal([]byte(s), &st)
	return st, err
}

// settingsOf decodes a stored sale's settings.
func settingsOf(sale store.Sale) (SaleSettings, error) {
	st, err := decodeSaleSettings(sale.Settings)
	if err != nil {
		return st, fmt.Errorf("settings of sale %s: %w", sale.ID, err)
	}
	return st, nil
}
