package service

import (
	"context"

	"github.com/seckill/seckill/inventory"
)

// WithPayment is withPayment, for tests of an order read from Redis before
// the database has it (the consumer is quick: over HTTP that is a race).
func (s *Service) WithPayment(ctx context.Context, o inventory.Order) inventory.Order {
	return s.withPayment(ctx, o)
}
