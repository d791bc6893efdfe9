package inventory

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// OrderOfKey returns the id of the order userID's buy with idempotency key
// made in the sale, as Redis holds it, without buying anything: found is
// false when Redis holds none (no such buy, or the sale is not in Redis,
// whose orders the database then holds). A caller that must answer a
// repeat of a buy before judging the buy itself (a buy whose admission
// is spent) asks it; the buy answers a repeat itself too.
func (e *Engine) OrderOfKey(ctx context.Context, saleID, userID, key string) (id string, found bool, err error) {
	id, err = e.rdb.HGet(ctx, e.keys(saleID).idem, userID+"|"+key).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("seckill: read the idempotency key of sale %s: %w", saleID, err)
	}
	return id, true, nil
}
