package service

import (
	"time"

	"github.com/seckill/seckill/internal/admission"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/store"
)

// AdmissionSettings are a sale's waiting room (room.go). Given to
// CreateSale, a zero field takes its default; as stored and shown, every
// default is resolved.
type AdmissionSettings struct {
	// OpensAt: joins are taken from then until the sale ends; default: at
	// creation (or DrawUntil, if that is earlier).
	OpensAt time.Time `json:"opens_at"`
	// DrawUntil: everyone who joined before it is in the draw; default the
	// sale's StartsAt, else OpensAt. OpensAt <= DrawUntil <= StartsAt.
	DrawUntil time.Time `json:"draw_until"`
	// RatePerS: admissions per second at the creation (SetAdmissionRate
	// changes the room's); 0: automatic.
	RatePerS int64 `json:"rate_per_s"`
	// CapacityPerS: admissions per second at most; default 1,000.
	CapacityPerS int64 `json:"capacity_per_s"`
	// AdmitTTLS: how long an admission is valid, in seconds (10..600);
	// default 120.
	AdmitTTLS int64 `json:"admit_ttl_s"`
	// MaxWaiting: joins past it are refused (room_full); default 1,000,000.
	MaxWaiting int64 `json:"max_waiting"`
}

// The rooms' defaults and bounds (the contract's).
const (
	defaultCapacityPerS = 1000
	maxRatePerS         = 1_000_000
	defaultAdmitTTLS    = 120
	minAdmitTTLS        = 10
	maxAdmitTTLS        = 600
	defaultMaxWaiting   = 1_000_000
	// maxMaxWaiting bounds a room's Redis memory (about 128 bytes a place).
	maxMaxWaiting = 10_000_000
)

// resolveAdmission checks a sale's room as given to CreateSale and returns
// it with its defaults resolved at now; nil for a sale without one. The
// sale's own checks (purchase tokens, segments) are checkSale's.
func resolveAdmission(sale inventory.Sale, given *AdmissionSettings, now time.Time) (*AdmissionSettings, error) {
	if given == nil {
		return nil, nil
	}
	a := *given
	a.OpensAt, a.DrawUntil = toMs(a.OpensAt), toMs(a.DrawUntil)
	now = toMs(now)
	if a.DrawUntil.IsZero() {
		switch {
		case !sale.StartsAt.IsZero():
			a.DrawUntil = toMs(sale.StartsAt)
		case !a.OpensAt.IsZero():
			a.DrawUntil = a.OpensAt
		default:
			a.DrawUntil = now
		}
	}
	if a.OpensAt.IsZero() {
		a.OpensAt = minTime(now, a.DrawUntil)
	}
	if a.CapacityPerS == 0 {
		a.CapacityPerS = defaultCapacityPerS
	}
	if a.AdmitTTLS == 0 {
		a.AdmitTTLS = defaultAdmitTTLS
	}
	if a.MaxWaiting == 0 {
		a.MaxWaiting = defaultMaxWaiting
	}
	if err := checkAdmission(sale, a); err != nil {
		return nil, err
	}
	return &a, nil
}

// checkAdmission checks a room's settings with every default resolved:
// at creation, and as read back from the database.
func checkAdmission(sale inventory.Sale, a AdmissionSettings) error {
	bad := func(field, reason string) error {
		return &inventory.InvalidError{Field: "admission." + field, Reason: reason}
	}
	switch {
	case a.OpensAt.IsZero() || a.DrawUntil.IsZero():
		return bad("opens_at", "and draw_until must be set")
	case a.DrawUntil.Before(a.OpensAt):
		return bad("draw_until", "must not be before opens_at")
	case !sale.StartsAt.IsZero() && a.DrawUntil.After(sale.StartsAt):
		return bad("draw_until", "must not be after starts_at")
	case !sale.EndsAt.IsZero() && a.DrawUntil.After(sale.EndsAt):
		return bad("draw_until", "must not be after ends_at (nor opens_at, which it defaults to)")
	case a.RatePerS < 0 || a.RatePerS > maxRatePerS:
		return bad("rate_per_s", reasonRate)
	case a.CapacityPerS < 1 || a.CapacityPerS > maxRatePerS:
		return bad("capacity_per_s", reasonCapacity)
	case a.AdmitTTLS < minAdmitTTLS || a.AdmitTTLS > maxAdmitTTLS:
		return bad("admit_ttl_s", reasonAdmitTTL)
	case a.MaxWaiting < 1 || a.MaxWaiting > maxMaxWaiting:
		return bad("max_waiting", reasonMaxWaiting)
	}
	return nil
}

// The reasons a room's numbers are refused for.
const (
	reasonRate       = "must be between 1 and 1000000 (0: automatic)"
	reasonCapacity   = "must be between 1 and 1000000"
	reasonAdmitTTL   = "must be between 10 and 600"
	reasonMaxWaiting = "must be between 1 and 10000000"
)

// roomConfig is the room of a sale as the engine of rooms takes it, at
// the rate ratePerS (the one the database holds now).
func roomConfig(sale store.Sale, a AdmissionSettings, ratePerS int64) admission.Config {
	return admission.Config{OpensAt: a.OpensAt, DrawUntil: a.DrawUntil, EndsAt: sale.EndsAt, RatePerS: ratePerS,
		CapacityPerS: a.CapacityPerS, AdmitTTL: time.Duration(a.AdmitTTLS) * time.Second, MaxWaiting: a.MaxWaiting}
}

// toMs is t to the millisecond, in UTC (the zero time stays zero): what
// the database and Redis keep of a time.
func toMs(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.Truncate(time.Millisecond).UTC()
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
