package inventory

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/seckill/seckill/internal/buycheck"
)

// Limits of the input the engine accepts. Anything outside them is ErrInvalid.
const (
	// MaxQty is the largest quantity of one line, and the largest stock or restock.
	MaxQty = 1_000_000_000
	// MaxLines is the largest number of distinct skus in one buy.
	MaxLines = 100
	// MaxItems is the largest number of items in one sale.
	MaxItems = 100_000
	// MaxIdempotencyKey is the longest idempotency key.
	MaxIdempotencyKey = 64
	// MaxPaymentTimeout is the longest payment timeout of a sale.
	MaxPaymentTimeout = 24 * time.Hour
	// Unlimited as an item's stock means the item never runs out; per-user
	// limits still apply to it.
	Unlimited = -1
	// maxStocked bounds an item's total stock over all restocks, so every
	// counter stays exact in Lua's double-precision numbers (< 2^53).
	maxStocked = 1_000_000_000_000_000
)

// ValidID reports whether id is a valid sale, sku, user or request id:
// 1 to 64 characters from A-Z a-z 0-9 _ . : - (the contract's
// ^[A-Za-z0-9_.:-]{1,64}$, checked without a regular expression: it runs
// on every buy).
func ValidID[T string | []byte](id T) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// Status is where a sale is in its life.
type Status string

// The statuses of a sale. Only StatusActive sells.
const (
	StatusUpcoming Status = "upcoming"
	StatusActive   Status = "active"
	StatusPaused   Status = "paused"
	StatusEnded    Status = "ended"
)

// Sale is the definition of a flash sale.
type Sale struct {
	ID string
	// PerUserLimit is how many units of each sku one user may hold (>= 1;
	// 0 means 1). It counts per (user, sku).
	PerUserLimit int64
	// StartsAt and EndsAt bound the time the sale sells; zero means unbounded.
	StartsAt, EndsAt time.Time
	Paused           bool
	Items            []Item
	// PaymentTimeout, if set, makes every order of the sale a reservation
	// that must be paid (Engine.Pay) within it, or expires (ExpireDue):
	// its units go back to stock and to the buyer's quota. Whole
	// milliseconds, at most MaxPaymentTimeout; 0: no payment step.
	PaymentTimeout time.Duration
}

// Item is one sku of a sale and its stock: when creating a sale, the initial
// stock; in a Snapshot, every unit ever stocked (initial plus restocks).
// Unlimited (-1) never runs out.
type Item struct {
	SKU   string
	Stock int64
}

// Line is one sku and quantity of a buy.
type Line struct {
	SKU string
	Qty int64
}

// OrderStatus is the state of an order.
type OrderStatus string

// Order statuses. The engine knows pending and cancelled; confirmed is set by
// the system of record once the order is stored there.
const (
	OrderPending   OrderStatus = "pending"
	OrderConfirmed OrderStatus = "confirmed"
	OrderCancelled OrderStatus = "cancelled"
)

// Order is an accepted buy.
type Order struct {
	ID             string
	SaleID         string
	UserID         string
	Status         OrderStatus
	Items          []Line
	IdempotencyKey string
	CreatedAt      time.Time
	// The payment step (see pay.go): Payment is "" where the reader did
	// not look it up; PayBy is set while awaiting, PaymentRef once paid.
	Payment    PaymentStatus
	PayBy      time.Time
	PaymentRef string
}

// KeyedOrder returns which of orders, one buyer's under one idempotency
// key in the order they were made, the key names: the first that is not
// cancelled, else the first. A key names more than one order only after
// degraded mode voided one (a buy whose outcome the instance never learned
// reached Redis after all, while the buyer's retry had bought from the
// database): the order its buyer holds is the live one. -1 for none.
func KeyedOrder(orders []Order) int {
	for i, o := range orders {
		if o.Status != OrderCancelled {
			return i
		}
	}
	return min(len(orders), 1) - 1
}

// Receipt is the result of Buy or Cancel: the order and the remaining stock
// of each of its items right after the call (-1 for unlimited items).
type Receipt struct {
	Order Order
	// Remaining is each line's remaining stock right after the call's
	// change (parallel to Order.Items); for a replay, and for a buy that
	// had to be sent again (Retried), it is the remaining at that moment.
	Remaining []int64
	// Replayed is true when Buy found an existing order for the idempotency
	// key (or Cancel found the order already cancelled by another call):
	// nothing was changed.
	Replayed bool
	// Retried is true when a buy's first attempt ran but its reply was lost,
	// and the attempt sent again found the order it had made: the order is
	// this call's, but Remaining is no longer what its own deduction left.
	Retried bool
}

// SaleState is a sale as Redis holds it now.
type SaleState struct {
	Sale   Sale // Items[i].Stock is the total stocked (initial + restocks)
	Status Status
	Items  []ItemState
	// Moves are the sale's records of moves of units out of it and into
	// it (Move), read with its counters: CountMoves tells from those of
	// several sales which units are on their way between them.
	Moves []Move
}

// ItemState is one item's counters. Remaining + Sold == Stocked for limited
// items (in the state of several sales summed as one, the segments of a hot
// item, Stocked counts the units on their way between them too:
// CountMoves); Remaining and Stocked are -1 for unlimited ones.
type ItemState struct {
	SKU       string
	Remaining int64
	Stocked   int64
	Sold      int64
	// Awaiting is how many of the Sold units orders awaiting payment hold
	// (a sale with a PaymentTimeout); they go back to stock if unpaid.
	Awaiting int64
}

// StatusAt says where a sale is at time now.
func StatusAt(paused bool, startsAt, endsAt, now time.Time) Status {
	switch {
	case !endsAt.IsZero() && !now.Before(endsAt):
		return StatusEnded
	case paused:
		return StatusPaused
	case !startsAt.IsZero() && now.Before(startsAt):
		return StatusUpcoming
	default:
		return StatusActive
	}
}

func validateID(field, id string) error {
	if !ValidID(id) {
		return invalid(field, "must be 1 to 64 characters from A-Z a-z 0-9 _ . : - (got %q)", truncate(id, 80))
	}
	return nil
}

// ValidateSale checks a sale definition as CreateSale would.
func ValidateSale(s Sale) error {
	if err := validateID("id", s.ID); err != nil {
		return err
	}
	if s.PerUserLimit < 0 || s.PerUserLimit > MaxQty {
		return invalid("per_user_limit", "must be between 1 and %d", MaxQty)
	}
	// Redis holds the window as unix ms, 0 meaning unbounded: an end at or
	// before 1970 would read as no end at all.
	if !s.EndsAt.IsZero() && s.EndsAt.UnixMilli() <= 0 {
		return invalid("ends_at", "must be after 1970-01-01T00:00:00Z")
	}
	if !s.StartsAt.IsZero() && !s.EndsAt.IsZero() && !s.EndsAt.After(s.StartsAt) {
		return invalid("ends_at", "must be after starts_at")
	}
	if s.PaymentTimeout < 0 || s.PaymentTimeout > MaxPaymentTimeout || s.PaymentTimeout%time.Millisecond != 0 {
		return invalid("payment_timeout", "must be whole milliseconds between 0 (none) and %v", MaxPaymentTimeout)
	}
	if len(s.Items) == 0 {
		return invalid("items", "must not be empty")
	}
	if len(s.Items) > MaxItems {
		return invalid("items", "at most %d items", MaxItems)
	}
	seen := make(map[string]struct{}, len(s.Items))
	for i, it := range s.Items {
		field := fmt.Sprintf("items[%d]", i)
		if err := validateID(field+".sku", it.SKU); err != nil {
			return err
		}
		if _, dup := seen[it.SKU]; dup {
			return invalid(field+".sku", "duplicate sku %q", it.SKU)
		}
		seen[it.SKU] = struct{}{}
		if it.Stock != Unlimited && (it.Stock < 0 || it.Stock > MaxQty) {
			return invalid(field+".stock", "must be -1 (unlimited) or between 0 and %d", MaxQty)
		}
	}
	return nil
}

// ValidateBuy checks the arguments of a buy as Buy would. (A buy's path
// runs it once, at its edge: CheckBuy.)
func ValidateBuy(saleID, userID string, lines []Line, idempotencyKey string) error {
	if buycheck.Hook != nil {
		buycheck.Hook(userID)
	}
	if err := validateID("sale", saleID); err != nil {
		return err
	}
	if err := validateID("user", userID); err != nil {
		return err
	}
	if err := validateIdempotencyKey(idempotencyKey); err != nil {
		return err
	}
	return validateLines(lines)
}

func validateLines(lines []Line) error {
	if len(lines) == 0 {
		return invalid("items", "must not be empty")
	}
	if len(lines) > MaxLines {
		return invalid("items", "at most %d lines in one order", MaxLines)
	}
	for i, l := range lines {
		// The field's name is formatted only for an error: a valid buy
		// allocates nothing here.
		if !ValidID(l.SKU) {
			return validateID(fmt.Sprintf("items[%d].sku", i), l.SKU)
		}
		for _, prev := range lines[:i] {
			if prev.SKU == l.SKU {
				return invalid(fmt.Sprintf("items[%d].sku", i), "duplicate sku %q in one order", l.SKU)
			}
		}
		if l.Qty < 1 || l.Qty > MaxQty {
			return validateQty(fmt.Sprintf("items[%d].qty", i), l.Qty)
		}
	}
	return nil
}

func validateQty(field string, qty int64) error {
	if qty < 1 || qty > MaxQty {
		return invalid(field, "must be between 1 and %d", MaxQty)
	}
	return nil
}

// validateIdempotencyKey accepts "" (no key) or 1 to 64 printable ASCII characters.
func validateIdempotencyKey(k string) error {
	if len(k) > MaxIdempotencyKey {
		return invalid("idempotency_key", "at most %d characters", MaxIdempotencyKey)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return invalid("idempotency_key", "must be printable ASCII without spaces")
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// formatLines encodes lines as "A=1,B=2" (sku ids never contain '=' or ',').
func formatLines(lines []Line) string {
	var b strings.Builder
	for i, l := range lines {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l.SKU)
		b.WriteByte('=')
		b.WriteString(strconv.FormatInt(l.Qty, 10))
	}
	return b.String()
}
