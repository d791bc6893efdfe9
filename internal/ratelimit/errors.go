package ratelimit

import (
	"errors"
	"fmt"
)

// Sentinel errors. A refusal by the limit itself is not an error: it is a
// Result with Allowed false. Errors from Redis itself (network, timeouts,
// replies such as WRONGTYPE) are returned wrapped, unchanged, unless a
// Fallback answers instead (see Options.Fallback).
var (
	// ErrInvalid: a key, limit or cost was rejected before Redis was asked.
	ErrInvalid = errors.New("ratelimit: invalid argument")
	// ErrCorrupt: a value in Redis is not what the limiter wrote (a counter
	// that is not an integer, say). The failing call wrote nothing.
	ErrCorrupt = errors.New("ratelimit: corrupt state in redis")
)

// InvalidError says which argument was rejected and why. It matches ErrInvalid.
type InvalidError struct {
	Field  string // "key", "n", "limit.rate", "limit.period", "limit.burst" or "limit.algorithm"
	Reason string // e.g. "must be at least 1"
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("ratelimit: invalid argument: %s %s", e.Field, e.Reason)
}

// Is reports whether target is ErrInvalid.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
