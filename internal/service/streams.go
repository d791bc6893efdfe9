package service

import (
	"fmt"
	"net/http"
	"net/netip"
	"sync"
)

// Caps on the live view's event streams (GET /v1/live with Accept:
// text/event-stream). A stream holds a goroutine, a connection and its
// buffers for as long as the client likes, without a token: past
// Config.LiveStreamsPerClient streams from one client the answer is 429,
// past Config.LiveStreams in all 503, both with Retry-After. A client is
// an IPv4 address, or an IPv6 /64 (clientOf).
const (
	DefaultLiveStreamsPerClient = 4
	DefaultLiveStreams          = 256
)

// streamSlots counts the open streams, by client address and in all.
type streamSlots struct {
	perClient, total int

	mu       sync.Mutex
	open     int
	byClient map[netip.Prefix]int
}

func newStreamSlots(perClient, total int) *streamSlots {
	if perClient <= 0 {
		perClient = DefaultLiveStreamsPerClient
	}
	if total <= 0 {
		total = DefaultLiveStreams
	}
	return &streamSlots{perClient: perClient, total: total, byClient: map[netip.Prefix]int{}}
}

// take reserves a stream for the client at addr; release gives it back.
func (c *streamSlots) take(addr netip.Addr) (release func(), err error) {
	client := clientOf(addr)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.byClient[client] >= c.perClient:
		return nil, &apiError{Status: http.StatusTooManyRequests, Code: "rate_limited", RetryAfter: 15,
			Message: fmt.Sprintf("too many live streams from this client (an IPv4 address, an IPv6 /64): the limit is %d; close one first", c.perClient)}
	case c.open >= c.total:
		return nil, &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", RetryAfter: 15,
			Message: fmt.Sprintf("this instance serves %d live streams, its limit; retry later", c.total)}
	}
	c.open++
	c.byClient[client]++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.open--
			if c.byClient[client]--; c.byClient[client] <= 0 {
				delete(c.byClient, client)
			}
		})
	}, nil
}
