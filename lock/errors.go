package lock

import (
	"errors"
	"fmt"
)

// Sentinel errors. Callers test for them with errors.Is; the errors returned
// carry details (which lock, which nodes) around them. Failures to reach Redis
// come back as *NodeError, wrapped, so errors.As finds the node and the cause.
var (
	// ErrNotAcquired: the lock is held by another owner (on enough nodes
	// that no quorum was possible, in quorum mode). The failed attempt has
	// deleted what it took on the nodes that answered in time, and deletes
	// it on slower ones when they answer.
	ErrNotAcquired = errors.New("lock: not acquired: held by another owner")

	// ErrLost: the lease stopped being the lock holder before it was released:
	// a renewal found another owner or no lock at all, or renewals failed for
	// so long that the lock may have expired in Redis. It is the cause of the
	// lease's context, and Release and Extend return it. Work done under the
	// lease may have overlapped with another holder's; only fencing makes
	// that harmless.
	ErrLost = errors.New("lock: lost")

	// ErrReleased: the lease was released by its holder. It is the cause of the
	// lease's context after a Release that came before any loss.
	ErrReleased = errors.New("lock: released")

	// ErrInvalid: a bad argument (lock name, TTL, option, client, fence) was
	// rejected before anything was sent to Redis.
	ErrInvalid = errors.New("lock: invalid argument")

	// ErrStaleFence: a protected write carried a fence lower than one the
	// resource has already seen, so it came from a holder that has since
	// been superseded. The write was refused and nothing changed. The error
	// is a *StaleFenceError.
	ErrStaleFence = errors.New("lock: stale fence")
)

// NodeError is a failure to run a command on one Redis node: a network
// error, a timeout, or an unexpected reply. Node is the index of the client
// in the slice given to NewQuorum (0 for a single-node Locker).
type NodeError struct {
	Node int
	Err  error
}

// Error names the node and its error.
func (e *NodeError) Error() string { return fmt.Sprintf("lock: node %d: %v", e.Node, e.Err) }

// Unwrap returns the underlying error.
func (e *NodeError) Unwrap() error { return e.Err }

// StaleFenceError is the ErrStaleFence returned by Guard.Set.
type StaleFenceError struct {
	Resource string
	Fence    Fence // the fence the write carried
	Highest  Fence // the highest fence the resource had accepted
}

// Error names the resource and both fences.
func (e *StaleFenceError) Error() string {
	return fmt.Sprintf("lock: stale fence %d for %q: it has accepted fence %d", e.Fence, e.Resource, e.Highest)
}

// Is makes errors.Is(err, ErrStaleFence) true.
func (e *StaleFenceError) Is(target error) bool { return target == ErrStaleFence }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
