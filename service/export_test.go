package service

import (
	"context"

	"github.com/valyala/fasthttp"

	"github.com/seckill/seckill/inventory"
)

// FastHandler is the handler `serve`'s fasthttp server runs (fast.go),
// for benchmarks that call it without a connection.
func (s *Service) FastHandler() fasthttp.RequestHandler { return s.fast.Handler }

// WithPayment is withPayment, for tests of an order read from Redis before
// the database has it (the consumer is quick: over HTTP that is a race).
func (s *Service) WithPayment(ctx context.Context, o inventory.Order) inventory.Order {
	return s.withPayment(ctx, o)
}
