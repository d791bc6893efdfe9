package service

import (
	"context"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill/seckill/internal/inventory"
)

// FastHandler is the handler `serve`'s fasthttp server runs (fast.go),
// for benchmarks that call it without a connection.
func (s *Service) FastHandler() fasthttp.RequestHandler { return s.fast.Handler }

// WithPayment is withPayment, for tests of an order read from Redis before
// the database has it (the consumer is quick: over HTTP that is a race).
func (s *Service) WithPayment(ctx context.Context, o inventory.Order) inventory.Order {
	return s.withPayment(ctx, o)
}

// RedisSells says whether this instance sells from Redis now: the mode it
// last heard is redis and it holds no restarted or promoted Redis back.
// The mode row may say redis earlier: a moment earlier after this
// instance's own recovery, up to a tick earlier after another instance's.
func (s *Service) RedisSells() bool { return s.seller.RedisSells() }

// ServerLogEvery is the least time between two lines of the HTTP servers'
// own log.
const ServerLogEvery = serverLogEvery

// OnSalesListBuild makes every build of a list of GET /v1/sales call
// f(key, build) instead of build: key is the list's query key ("live", or
// "archived|<limit>|<after>"); f must call build once.
func (s *Service) OnSalesListBuild(f func(key string, build func())) { s.salesList.onBuild.Store(&f) }

// SalesListWaiting is how many requests of GET /v1/sales wait, for a list
// another request builds or for their turn to build one.
func (s *Service) SalesListWaiting() int { return int(s.salesList.waiting.Load()) }

// RunExpiry runs the expiry loop, every tick, until ctx ends: for a test
// whose service started without one (ExpireEvery < 0) and that wants
// reservations to expire only from some point on.
func (s *Service) RunExpiry(ctx context.Context, every time.Duration) { s.expiryLoop(ctx, every) }
