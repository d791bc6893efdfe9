// Package buycheck lets tests count how often a buy's arguments are
// validated (inventory.ValidateBuy), to prove that a buy is validated once
// on its path, whichever packages it goes through. Outside tests Hook is
// nil and costs a nil check.
package buycheck

import (
	"strings"
	"sync"
	"sync/atomic"
)

// Hook, if set, is told the user of every inventory.ValidateBuy. Only
// Count sets it, before any buy.
var Hook func(userID string)

// Prefix begins the user ids whose validations Count counts (the others
// cost a prefix check: a valid buy still allocates nothing).
const Prefix = "counted-"

var counts sync.Map // user id -> *atomic.Int64

// Count makes Hook count the validations of users whose id begins with
// Prefix. Call it from a test package's init, before any buy.
func Count() {
	Hook = func(user string) {
		if strings.HasPrefix(user, Prefix) {
			n, _ := counts.LoadOrStore(user, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
		}
	}
}

// Of is how many times a buy of user (an id beginning with Prefix) was
// validated since Count.
func Of(user string) int64 {
	if n, ok := counts.Load(user); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}
