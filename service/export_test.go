package service

import (
	"context"
	"net/http"

	"github.com/seckill/seckill/inventory"
)

// Handler is the service's HTTP handler, for benchmarks that call it
// without a connection.
func (s *Service) Handler() http.Handler { return s.http.Handler }

// WithPayment is withPayment, for tests of an order read from Redis before
// the database has it (the consumer is quick: over HTTP that is a race).
func (s *Service) WithPayment(ctx context.Context, o inventory.Order) inventory.Order {
	return s.withPayment(ctx, o)
}
