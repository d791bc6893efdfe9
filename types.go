package seckill

import (
	"time"

	"github.com/seckill/seckill/internal/admission"
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
	// Admission, if set, puts a waiting room in front of the sale's buys:
	// buyers join it (System.Join), wait for their turn (System.Place)
	// and buy with the admission it gives them, as BuyRequest.PurchaseToken.
	// A sale with a room requires no purchase token and has no segments.
	Admission *Admission
}

// Admission is a sale's waiting room. Everyone who joins before DrawUntil
// is in one draw: their order is random, drawn with a secret the sale
// committed to at its creation, and published (System.Draw). Later joins
// queue behind the draw in arrival order. Buyers are admitted in that
// order as fast as the rate allows, and never more at once than there
// are units left. A zero field takes its default.
type Admission struct {
	// OpensAt: joins are taken from then until the sale ends; default: at
	// creation.
	OpensAt time.Time
	// DrawUntil ends the draw's joins; default StartsAt, else OpensAt.
	// OpensAt <= DrawUntil <= StartsAt.
	DrawUntil time.Time
	// RatePerS is the admissions per second (up to 1,000,000); 0:
	// automatic, as fast as the units left and CapacityPerS allow.
	RatePerS int64
	// CapacityPerS is the admissions per second at most; default 1,000.
	CapacityPerS int64
	// AdmitTTL is how long an admission stays valid, in whole seconds
	// from 10s to 10m (never past EndsAt); default 2m.
	AdmitTTL time.Duration
	// MaxWaiting: joins past it are ErrRoomFull; default 1,000,000.
	MaxWaiting int64
}

// Place is a buyer's place in a sale's waiting room.
type Place struct {
	// Status is where the buyer is: drawing, waiting, admitted, used,
	// lapsed or sold out.
	Status PlaceStatus
	// JoinedAt is when the buyer joined; InDraw says it was before the
	// draw's end.
	JoinedAt time.Time
	InDraw   bool
	// Position (from 1) and Ahead (Position-1), while PlaceWaiting: the
	// buyer's rank among those not admitted yet; it only goes down.
	Position, Ahead int64
	// ETA, while PlaceWaiting, is Ahead ÷ the admissions per second of the
	// last 10 s; HasETA is false when nobody was admitted in that time.
	ETA    time.Duration
	HasETA bool
	// Admission, while PlaceAdmitted, is the admission to buy with
	// (BuyRequest.PurchaseToken), valid until AdmittedUntil.
	Admission     string
	AdmittedUntil time.Time
	// OrderID, while PlaceUsed, is the order the admission bought.
	OrderID string
	// PollAfter is when to read the place again.
	PollAfter time.Duration
}

// PlaceStatus is where a buyer is in a sale's waiting room.
type PlaceStatus = admission.Status

// The statuses of a buyer's place. PlaceSoldOut: no unit is left, no
// admission is out and no reservation awaits payment; should units come
// back, the buyer is waiting again at the same rank.
const (
	PlaceDrawing  = admission.Drawing
	PlaceWaiting  = admission.Waiting
	PlaceAdmitted = admission.Admitted
	PlaceUsed     = admission.Used
	PlaceLapsed   = admission.Lapsed
	PlaceSoldOut  = admission.SoldOut
)

// QueueStats are a waiting room's counts: Waiting and Drawing are the
// buyers in line and in the draw now, Live the unused admissions out now;
// Admitted, Used and Lapsed are totals since the room opened. RatePerS is
// the rate now (0: automatic), DrawSize the buyers in the draw (0 before
// it).
type QueueStats struct {
	Waiting, Drawing, Live int64
	Admitted, Used, Lapsed int64
	RatePerS, DrawSize     int64
}

// Draw is the published record of a waiting room's draw: before the draw
// only its Commitment, after it every field, which anyone can check
// (`seckill draw verify`).
type Draw = admission.Draw

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
