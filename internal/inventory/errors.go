package inventory

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors. Every error the engine returns for a business outcome matches
// exactly one of them with errors.Is; the typed errors below carry the details.
// Errors from Redis itself (network, timeouts) are returned wrapped, unchanged.
var (
	// ErrInvalid: the input was rejected before anything was written.
	ErrInvalid = errors.New("seckill: invalid argument")
	// ErrNotFound: unknown sale, unknown sku in a sale, or unknown order.
	ErrNotFound = errors.New("seckill: not found")
	// ErrExists: creating a sale whose id is already in use.
	ErrExists = errors.New("seckill: already exists")
	// ErrSoldOut: at least one item has fewer units left than asked for.
	ErrSoldOut = errors.New("seckill: sold out")
	// ErrLimitExceeded: the buy would take the buyer over the per-user limit.
	ErrLimitExceeded = errors.New("seckill: per-user limit exceeded")
	// ErrThrottled: the buy's throttle (BuyRequest.Throttle) refused it.
	ErrThrottled = errors.New("seckill: buyer rate limited")
	// ErrSaleNotActive: the sale has not started, has ended, or is paused.
	ErrSaleNotActive = errors.New("seckill: sale not active")
	// ErrUnavailable: the sale's state is missing from Redis and could not be
	// rebuilt in time (another instance is rebuilding it, or orders are still in
	// flight to the system of record). Safe to retry.
	ErrUnavailable = errors.New("seckill: sale state unavailable")
	// ErrFenced: the sale is fenced off in Redis (Engine.Fence) because the
	// database sells it (degraded mode); nothing was written. Buy it through
	// the database, or wait for Redis to be repaired and the fence lifted.
	ErrFenced = errors.New("seckill: sale fenced off in redis: the database sells it")
	// ErrIdempotencyMismatch: a buy's idempotency key names an order of the
	// same user with other lines; nothing was written. A repeat must send
	// the same lines; a new buy needs a new key.
	ErrIdempotencyMismatch = errors.New("seckill: idempotency key reused with other lines")
	// ErrTokenSpent: the buy's purchase token (BuyRequest.Token) was spent
	// by an earlier accepted buy; nothing was written.
	ErrTokenSpent = errors.New("seckill: purchase token already spent")
	// ErrTokenRequired: a buy of a sale that requires purchase tokens
	// carried none, or one not valid for this sale and buyer (forged, another
	// sale's or user's, expired); nothing was written. The service checks a
	// token before the buy; the engine only spends it (ErrTokenSpent).
	ErrTokenRequired = errors.New("seckill: a valid purchase token for this sale is required")
	// ErrCorrupt: a value in Redis is not what the engine wrote (for example a
	// counter that is not an integer). Nothing was written by the failing call.
	ErrCorrupt = errors.New("seckill: corrupt state in redis")
)

// InvalidError says which argument was rejected and why. It matches ErrInvalid.
type InvalidError struct {
	Field  string // e.g. "items[1].qty"
	Reason string // e.g. "must be between 1 and 1000000000"
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("seckill: invalid argument: %s %s", e.Field, e.Reason)
}

// Is reports whether target is ErrInvalid.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// NotFoundError names what was not found. It matches ErrNotFound.
type NotFoundError struct {
	Kind string   // "sale", "sku" or "order"
	IDs  []string // the ids that were not found (every unknown sku of a buy)
}

func (e *NotFoundError) Error() string { return "seckill: " + e.Message() }

// Message is the error's text without the package's prefix: what was not
// found, for a reply to a client.
func (e *NotFoundError) Message() string {
	return fmt.Sprintf("%s not found: %s", e.Kind, strings.Join(e.IDs, ", "))
}

// Is reports whether target is ErrNotFound.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// SoldOutError lists every sku of a buy that is short. It matches ErrSoldOut.
type SoldOutError struct{ SKUs []string }

func (e *SoldOutError) Error() string {
	return "seckill: sold out: " + strings.Join(e.SKUs, ", ")
}

// Is reports whether target is ErrSoldOut.
func (e *SoldOutError) Is(target error) bool { return target == ErrSoldOut }

// LimitError lists every sku of a buy that would exceed the per-user limit.
// It matches ErrLimitExceeded.
type LimitError struct {
	SKUs  []string
	Limit int64
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("seckill: per-user limit %d exceeded: %s", e.Limit, strings.Join(e.SKUs, ", "))
}

// Is reports whether target is ErrLimitExceeded.
func (e *LimitError) Is(target error) bool { return target == ErrLimitExceeded }

// NotActiveError says why a sale does not sell right now. It matches ErrSaleNotActive.
type NotActiveError struct{ Status Status }

func (e *NotActiveError) Error() string {
	return "seckill: sale not active: " + string(e.Status)
}

// Is reports whether target is ErrSaleNotActive.
func (e *NotActiveError) Is(target error) bool { return target == ErrSaleNotActive }

// ThrottledError is a buy its throttle refused; the same buy would be let
// through after RetryAfter. It matches ErrThrottled.
type ThrottledError struct{ RetryAfter time.Duration }

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("seckill: buyer rate limited; retry in %v", e.RetryAfter)
}

// Is reports whether target is ErrThrottled.
func (e *ThrottledError) Is(target error) bool { return target == ErrThrottled }
