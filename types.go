package seckill

import (
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// Unlimited as an Item's Stock means the item never runs out; the per-user
// limit still applies to it.
const Unlimited = inventory.Unlimited

// Sale is the definition of a flash sale, given to CreateSale.
type Sale struct {
	// ID names the sale: 1 to 64 characters of A-Z a-z 0-9 _ . : -.
	ID string
	// PerUserLimit is how many units of each sku one buyer may hold (0
	// means 1). It counts per (buyer, sku), across all their orders.
	PerUserLimit int64
	// StartsAt and EndsAt bound when the sale sells; zero means unbounded.
	StartsAt, EndsAt time.Time
	// Items are the skus on sale and their stock (at most 100,000).
	Items []Item
	// PaymentTimeout, if set, makes every order a reservation that must be
	// paid (System.Pay) within it, or expires: its units go back to stock
	// and to the buyer's quota. At most 24h, in whole milliseconds (the
	// HTTP API takes and shows whole seconds); 0: no payment step, orders
	// are final.
	PaymentTimeout time.Duration
	// RequirePurchaseToken makes every buy carry a purchase token
	// (System.PurchaseToken) bound to the buyer and the sale, spent once.
	RequirePurchaseToken bool
	// RateLimits are the sale's own rate limits, over the Config's.
	RateLimits RateLimits
}

// Item is one sku of a sale.
type Item struct {
	// SKU names the item (as a sale id is named).
	SKU string
	// Stock is the units on sale (0 to 1,000,000,000), or Unlimited.
	Stock int64
	// Segments spreads a hot item's stock over that many parts (1 to 64)
	// that can live on different Redis Cluster masters; 0 or 1: one. A sale
	// with a segmented item is split whole; see docs/lifecycle.md.
	Segments int
}

// RateLimits are a sale's own limits on buys, each "N/s", "N/m" or "N/h"
// with an optional ",burst=B", or "off"; "" keeps the Config's.
type RateLimits struct {
	PerUser, PerIP, PerSale string
}

// Status is where a sale is in its life: StatusUpcoming, StatusActive,
// StatusPaused or StatusEnded. Only an active sale sells.
type Status = inventory.Status

// The statuses of a sale.
const (
	StatusUpcoming = inventory.StatusUpcoming
	StatusActive   = inventory.StatusActive
	StatusPaused   = inventory.StatusPaused
	StatusEnded    = inventory.StatusEnded
)

// SaleState is a sale as it stands now.
type SaleState struct {
	// Sale is the definition, with each item's Stock the units stocked in
	// all (initial and restocks).
	Sale Sale
	// Status is where the sale is now.
	Status Status
	// Items are the sale's counters, in the order of Sale.Items.
	Items []ItemState
	// Archived: the sale has ended and left Redis; it is read from the
	// database, where its orders stay.
	Archived bool
}

// ItemState is one item's counters: Remaining + Sold == Stocked, or -1 for
// Remaining and Stocked of an unlimited item.
type ItemState struct {
	SKU       string
	Remaining int64
	Stocked   int64
	Sold      int64
	// AwaitingPayment is how many of the Sold units orders awaiting
	// payment hold (a sale with a PaymentTimeout).
	AwaitingPayment int64
}

// Line is one sku and quantity of a buy or an order.
type Line struct {
	SKU string
	// Qty is the units (1 to 1,000,000,000).
	Qty int64
}

// BuyRequest is one buyer's buy, all its lines or none.
type BuyRequest struct {
	// SaleID and UserID say what is bought and by whom.
	SaleID, UserID string
	// Lines are the skus and quantities (at most 100, no sku twice).
	Lines []Line
	// IdempotencyKey, if set (1 to 64 printable characters), makes a resent
	// buy return the first one's order (Receipt.Replayed) and change
	// nothing.
	IdempotencyKey string
	// PurchaseToken is the buyer's token, for a sale that requires one.
	PurchaseToken string
}

// Receipt is what a buy returns.
type Receipt struct {
	// Order is the order the buy made, or, for a replay, the one an
	// earlier buy with the same idempotency key made (as it stands now: it
	// may have been confirmed, paid or cancelled since).
	Order Order
	// Remaining is each line's stock left right after the buy (-1 for an
	// unlimited item), in the order of Order.Items; for a replay, what is
	// left now.
	Remaining []int64
	// Replayed: the idempotency key named an earlier order; this call
	// changed nothing.
	Replayed bool
}

// Order is an accepted buy.
type Order struct {
	// ID names the order; it is unique and sorts by time.
	ID string
	// SaleID is the sale it was bought in.
	SaleID string
	// UserID is the buyer.
	UserID string
	// Status is OrderPending until the database holds the order, then
	// OrderConfirmed; OrderCancelled once cancelled or expired.
	Status OrderStatus
	// Items are the order's lines.
	Items []Line
	// IdempotencyKey is the key the buy carried ("" for none).
	IdempotencyKey string
	// CreatedAt is when Redis accepted the buy (Redis's clock).
	CreatedAt time.Time
	// Payment is where the order's payment is (PaymentNotRequired for a
	// sale without a payment step); PayBy is its deadline while
	// PaymentAwaiting; PaymentRef the reference it was paid under.
	Payment    PaymentStatus
	PayBy      time.Time
	PaymentRef string
}

// OrderStatus is an order's state: OrderPending (accepted, not yet in the
// database), OrderConfirmed (in the database) or OrderCancelled.
type OrderStatus = inventory.OrderStatus

// The states of an order.
const (
	OrderPending   = inventory.OrderPending
	OrderConfirmed = inventory.OrderConfirmed
	OrderCancelled = inventory.OrderCancelled
)

// PaymentStatus is where an order's payment is: PaymentNotRequired,
// PaymentAwaiting (until its PayBy), PaymentPaid or PaymentExpired.
type PaymentStatus = inventory.PaymentStatus

// The states of an order's payment.
const (
	PaymentNotRequired = inventory.PaymentNotRequired
	PaymentAwaiting    = inventory.PaymentAwaiting
	PaymentPaid        = inventory.PaymentPaid
	PaymentExpired     = inventory.PaymentExpired
)

// PurchaseToken is a single-use token that lets one buyer buy in one sale
// that requires it, until ExpiresAt.
type PurchaseToken struct {
	Token     string
	ExpiresAt time.Time
}

// Report is a reconciliation of a sale: Redis's counters, the orders on
// their way and the database's, compared item by item.
type Report struct {
	Sale string
	// Consistent: for every item, Remaining + Sold == Stocked and
	// OrdersInDB + InFlight == Sold, and no unit is on its way between a
	// hot item's segments.
	Consistent bool
	Items      []ReportItem
}

// ReportItem is one item's figures in a Report.
type ReportItem struct {
	SKU string
	// Stocked is initial + restocked; Remaining what is left; Sold the
	// units in live (not cancelled, not expired) orders.
	Stocked, Remaining, Sold int64
	// OrdersInDB are the sold units the database holds, InFlight those on
	// their way to it.
	OrdersInDB, InFlight int64
	// Moving are units on their way between a hot item's segments.
	Moving int64
	// Drift is OrdersInDB + InFlight - Sold (0 when consistent).
	Drift int64
}
