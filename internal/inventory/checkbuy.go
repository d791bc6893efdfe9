package inventory

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seckill/seckill/internal/gcra"
)

// CheckedBuy is a buy whose arguments passed CheckBuy: a valid sale, user,
// lines and idempotency key, a valid throttle, token and token TTL if set,
// and a well-formed order id if set. Its fields are unexported, so holding
// one proves it was checked: the engine (BuyChecked) and the database's
// degraded mode (package store) sell it without checking it again.
//
// The order id's sale is the one place checked later: a segmented sale's
// buy carries an order id of its home segment until InSale moves it there,
// so the engine makes sure, when it sells a buy, that its order id is of
// the sale it sells it in. The zero CheckedBuy is no buy: the engine
// refuses it as invalid, the database as an unknown sale.
type CheckedBuy struct {
	saleID, userID string
	lines          []Line
	key            string
	token          string
	tokenTTL       int64 // ms, >= 1 with a token
	gate           int64 // unix ms, 0 for none (WithGate)
	orderID        string
	newID          bool        // orderID is WithNewOrderID's: the engine may choose another
	throttle       gcra.Bucket // zero for none
	ignoreSoldOut  bool
}

// CheckBuy checks a buy's arguments, as BuyWith does, and returns them as a
// CheckedBuy; its errors match ErrInvalid (*InvalidError naming the field).
// The buy keeps a copy of r.Lines: a change the caller makes to them after
// the check changes nothing the buy sells.
func CheckBuy(r BuyRequest) (CheckedBuy, error) {
	c, err := checkBuy(r)
	if err != nil {
		return CheckedBuy{}, err
	}
	c.lines = slices.Clone(c.lines)
	return c, nil
}

// checkBuy is CheckBuy keeping r.Lines themselves, for BuyWith and BuyMany,
// which sell the buy before they return (as they always did).
func checkBuy(r BuyRequest) (CheckedBuy, error) {
	if err := ValidateBuy(r.SaleID, r.UserID, r.Lines, r.IdempotencyKey); err != nil {
		return CheckedBuy{}, err
	}
	c := CheckedBuy{saleID: r.SaleID, userID: r.UserID, lines: r.Lines, key: r.IdempotencyKey, ignoreSoldOut: r.IgnoreSoldOutFlags}
	var err error
	if c, err = c.WithThrottle(r.Throttle); err != nil {
		return CheckedBuy{}, err
	}
	if c, err = c.WithToken(r.Token, r.TokenTTL); err != nil {
		return CheckedBuy{}, err
	}
	if r.OrderID != "" {
		if _, err := SaleOfOrder(r.OrderID); err != nil {
			return CheckedBuy{}, orderOfOtherSale(r.SaleID)
		}
		c.orderID = r.OrderID
	}
	return c, nil
}

// WithThrottle returns the buy with throttle t (BuyRequest.Throttle), or
// the buy itself for nil; only t is checked.
func (c CheckedBuy) WithThrottle(t *Throttle) (CheckedBuy, error) {
	if t == nil {
		return c, nil
	}
	th, err := t.bucket()
	if err != nil {
		return CheckedBuy{}, err
	}
	c.throttle = th
	return c, nil
}

// WithToken returns the buy spending purchase token token, kept spent for
// ttl (BuyRequest.Token and TokenTTL), or the buy itself for token "";
// only they are checked.
func (c CheckedBuy) WithToken(token string, ttl time.Duration) (CheckedBuy, error) {
	if token == "" {
		return c, nil
	}
	if err := validateID("token", token); err != nil {
		return CheckedBuy{}, err
	}
	if c.tokenTTL = ttl.Milliseconds(); c.tokenTTL < 1 {
		return CheckedBuy{}, invalid("token_ttl", "must be at least 1ms")
	}
	c.token = token
	return c, nil
}

// WithGate returns the buy whose token (WithToken, first) is a waiting
// room's admission nonce (package admission keeps the room): the buy is
// accepted only if the room's state of the buyer ("room:cfg",
// "room:b:<n>") is a live admission whose nonce is the token and whose
// until is until, Redis's clock is before until, and the token is not
// marked spent; else it is refused as ErrTokenSpent. A buy it accepts
// spends the admission in the room in the same script (its state becomes
// used, with the order), which is what makes it single use in Redis: it
// keeps no spent mark there, and the token's TTL is not used. Its order
// carries the token to the system of record as spent until until
// (Event.Spent), so that a sale rebuilt or repaired after Redis lost the
// spend gets its mark back.
func (c CheckedBuy) WithGate(until time.Time) (CheckedBuy, error) {
	if c.token == "" {
		return CheckedBuy{}, invalid("gate", "needs a token")
	}
	if c.gate = until.UnixMilli(); c.gate < 1 {
		return CheckedBuy{}, invalid("gate", "must be after 1970")
	}
	return c, nil
}

// SaleID is the sale the buy is made in.
func (c CheckedBuy) SaleID() string { return c.saleID }

// UserID is the buyer.
func (c CheckedBuy) UserID() string { return c.userID }

// Lines are the buy's lines: a copy, so that whoever holds the buy cannot
// change what it sells.
func (c CheckedBuy) Lines() []Line { return slices.Clone(c.lines) }

// IdempotencyKey is the buy's idempotency key, "" for none.
func (c CheckedBuy) IdempotencyKey() string { return c.key }

// OrderID is the id of the order the buy makes, "" until one is chosen.
func (c CheckedBuy) OrderID() string { return c.orderID }

// Token is the purchase token the buy spends, "" for none.
func (c CheckedBuy) Token() string { return c.token }

// TokenTTL is how long the buy keeps its purchase token spent (0 for none).
func (c CheckedBuy) TokenTTL() time.Duration { return time.Duration(c.tokenTTL) * time.Millisecond }

// Throttled reports whether the buy has a throttle.
func (c CheckedBuy) Throttled() bool { return c.throttle.Rate != 0 }

// InSale returns the buy made in saleID instead (a segmented sale's buy in
// its buyer's home segment). Only the new id is checked; an order id the
// buy carries must be of saleID when the engine sells it. The zero
// CheckedBuy stays no buy: it is refused (a sale is what tells a checked
// buy from the zero one).
func (c CheckedBuy) InSale(saleID string) (CheckedBuy, error) {
	if c.saleID == "" {
		return CheckedBuy{}, noBuy()
	}
	if err := validateID("sale", saleID); err != nil {
		return CheckedBuy{}, err
	}
	c.saleID = saleID
	return c, nil
}

// WithNewOrderID returns the buy with a new order id of saleID (the buy's
// sale, or the home segment InSale will move it to), or the buy itself if
// it has an order id already. The engine may still give it another new id
// of that sale, one of its call's group, before it first sends it: the
// receipt, or on an error the receipt's Order (see Buy), has the id it was
// sent under.
func (c CheckedBuy) WithNewOrderID(saleID string) CheckedBuy {
	if c.orderID == "" {
		c.orderID, c.newID = NewOrderID(saleID), true
	}
	return c
}

// WithoutThrottle returns the buy without its throttle.
func (c CheckedBuy) WithoutThrottle() CheckedBuy {
	c.throttle = gcra.Bucket{}
	return c
}

// IgnoringSoldOutFlags returns the buy sent to Redis even if the engine
// flagged an item of it sold out (BuyRequest.IgnoreSoldOutFlags).
func (c CheckedBuy) IgnoringSoldOutFlags() CheckedBuy {
	c.ignoreSoldOut = true
	return c
}

// checkOrderOfSale is the rule the engine keeps when it sells c: c is a
// buy (not the zero CheckedBuy), and its order id, if set, is of c's sale
// (CheckBuy found it well-formed).
func (c CheckedBuy) checkOrderOfSale() error {
	if c.saleID == "" {
		return noBuy()
	}
	if c.orderID == "" {
		return nil
	}
	if i := strings.LastIndex(c.orderID, orderIDSep); i != len(c.saleID) || c.orderID[:i] != c.saleID {
		return orderOfOtherSale(c.saleID)
	}
	return nil
}

// noBuy refuses the zero CheckedBuy, the one without a sale: only
// CheckBuy sets a buy's sale, and InSale only moves one it set.
func noBuy() error { return invalid("sale", "no buy: a CheckedBuy comes from CheckBuy") }

func orderOfOtherSale(saleID string) error {
	return invalid("order_id", "must be an order id of sale %s", saleID)
}

// gateArg is buy.lua's gate argument of a buy with gate ms (0: none).
func gateArg(ms int64) string {
	if ms == 0 {
		return ""
	}
	return strconv.FormatInt(ms, 10)
}
