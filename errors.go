package seckill

import (
	"github.com/seckill/seckill/internal/admission"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/service"
)

// The outcomes a System's verbs report, to test with errors.Is. A refused
// call changed nothing. Errors of Redis or the database themselves come
// back wrapped and match none of these, but ErrUnavailable where the
// System knows a retry will do.
var (
	// ErrInvalid: bad input (an id, a quantity, a field); see *InvalidError.
	ErrInvalid = inventory.ErrInvalid
	// ErrNotFound: an unknown sale, sku or order; see *NotFoundError.
	ErrNotFound = inventory.ErrNotFound
	// ErrExists: CreateSale of an id in use; the existing sale is untouched.
	ErrExists = inventory.ErrExists
	// ErrSaleNotActive: the sale is upcoming, paused or ended; see *NotActiveError.
	ErrSaleNotActive = inventory.ErrSaleNotActive
	// ErrSoldOut: too few units left of some sku; see *SoldOutError.
	ErrSoldOut = inventory.ErrSoldOut
	// ErrLimitExceeded: the buy would take the buyer over the per-user
	// limit of some sku; see *LimitError.
	ErrLimitExceeded = inventory.ErrLimitExceeded
	// ErrThrottled: a rate limit refused the call; see *ThrottledError.
	ErrThrottled = inventory.ErrThrottled
	// ErrUnavailable: neither Redis nor the database could take the call
	// now (or the call needs Redis while the database sells); retry.
	ErrUnavailable = inventory.ErrUnavailable
	// ErrIdempotencyMismatch: the idempotency key names this buyer's order
	// of other lines.
	ErrIdempotencyMismatch = inventory.ErrIdempotencyMismatch
	// ErrTokenRequired: the sale requires a purchase token and the buy's is
	// missing, another buyer's or sale's, or expired; or the sale has a
	// waiting room and the buy carries no live admission of the buyer.
	ErrTokenRequired = inventory.ErrTokenRequired
	// ErrTokenSpent: the buy's purchase token bought an order already.
	ErrTokenSpent = inventory.ErrTokenSpent
	// ErrAlreadyPaid: the order was paid with another payment reference.
	ErrAlreadyPaid = inventory.ErrAlreadyPaid
	// ErrOrderClosed: the order was cancelled or expired; it cannot be paid.
	ErrOrderClosed = inventory.ErrOrderClosed
	// ErrNoPayment: the order's sale has no payment step (it matches
	// ErrInvalid too).
	ErrNoPayment = inventory.ErrNoPayment
	// ErrCorrupt: a value in Redis is not what seckill wrote; the call
	// wrote nothing.
	ErrCorrupt = inventory.ErrCorrupt
	// ErrAdmissionRequired: the sale has a waiting room; it is bought with
	// admissions, not purchase tokens.
	ErrAdmissionRequired = service.ErrAdmissionRequired
	// ErrAdmissionNotEnabled: the sale has no waiting room.
	ErrAdmissionNotEnabled = service.ErrAdmissionNotEnabled
	// ErrRoomFull: the sale's waiting room holds Admission.MaxWaiting
	// buyers; retry later.
	ErrRoomFull = admission.ErrRoomFull
	// ErrNotJoined: the buyer never joined the sale's waiting room.
	ErrNotJoined = admission.ErrNotJoined
)

// InvalidError names the input that was refused (Field) and why (Reason).
type InvalidError = inventory.InvalidError

// NotFoundError names what was not found: Kind ("sale", "sku", "order")
// and IDs.
type NotFoundError = inventory.NotFoundError

// SoldOutError names every sku of a buy with too few units left (SKUs).
type SoldOutError = inventory.SoldOutError

// LimitError names every sku the buyer would hold more than Limit of.
type LimitError = inventory.LimitError

// NotActiveError says where the sale is (Status) when it does not sell.
type NotActiveError = inventory.NotActiveError

// ThrottledError says how long to wait (RetryAfter) before the call can pass.
type ThrottledError = inventory.ThrottledError
