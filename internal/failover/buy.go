package failover

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/store"
)

// ErrNobodySells: neither Redis nor the database sells now (the grace
// period after a switch, a recovery, Redis unreachable with degraded mode
// off), or the mode changed under the call. Nothing was changed; retry. It
// matches inventory.ErrUnavailable.
var ErrNobodySells = fmt.Errorf("failover: nobody sells now: %w", inventory.ErrUnavailable)

// ErrTokensNeedRedis refuses a buy that spends a purchase token while the
// database sells: a token's single use is kept in Redis. The token stays
// unspent.
var ErrTokensNeedRedis = errors.New("failover: purchase tokens are checked in redis, which does not sell now")

// Buy sells b, checked already (inventory.CheckBuy) and not checked
// again, where it may be sold now: from Redis, or from the database in
// degraded mode (after BeforeDatabaseBuy), or nowhere (ErrNobodySells).
// A buy Redis refuses as fenced, or cannot be sent to Redis, goes to the
// database if the mode changed to it meanwhile. A buy whose outcome stays
// unknown is handed over (unsure buys) under the order id the engine sent
// it under: b's own, or a new one of its home sale (WithNewOrderID: the
// engine may give it one of its call's group, and says which in the
// receipt, on an error too). A buy that carries a purchase token is not
// sold by the database (ErrTokensNeedRedis). Errors are the engine's and
// the store's typed ones, ErrNobodySells and ErrTokensNeedRedis.
//
// A buy of a segmented sale (Parts.Segments) is made in the buyer's home
// segment: its order id is of that segment, and the database sells it from
// that segment's row alone.
func (f *Seller) Buy(ctx context.Context, b inventory.CheckedBuy) (inventory.Receipt, error) {
	home, err := f.home(ctx, b.SaleID(), b.UserID())
	if err != nil {
		return inventory.Receipt{}, err
	}
	if !f.beginRedisBuy() {
		return f.buyOnDB(ctx, b, home)
	}
	began := time.Now()
	rc, err := f.buyOnRedis(ctx, b.WithNewOrderID(home))
	if err != nil {
		var throttled *inventory.ThrottledError
		if errors.As(err, &throttled) {
			return rc, err
		}
	}
	if f.cfg.Observe != nil {
		f.cfg.Observe(err, time.Since(began), false)
	}
	if errors.Is(err, inventory.ErrFenced) || err != nil && RedisDown(err) {
		if _, ok := f.dbSells(); ok { // the mode changed while the buy was on its way
			return f.buyOnDB(ctx, b, home)
		}
		return rc, ErrNobodySells
	}
	return rc, err
}

// buyOnRedis buys from Redis, for a buy counted on its way by
// beginRedisBuy; it records how the buy ended (endRedisBuy). A stale fence
// (an older epoch's, left by a recovery that died) is lifted, and the buy
// sent again.
func (f *Seller) buyOnRedis(ctx context.Context, b inventory.CheckedBuy) (rc inventory.Receipt, err error) {
	defer func() { f.endRedisBuy(b, rc, err) }()
	rc, err = f.eng.BuyChecked(ctx, b)
	if errors.Is(err, inventory.ErrFenced) && f.liftStaleFence(ctx, b.SaleID()) {
		rc, err = f.eng.BuyChecked(ctx, b)
	}
	return rc, err
}

// buyOnDB buys on the database in degraded mode, or refuses while nobody
// sells. It keeps the defences of a buy from Redis: BeforeDatabaseBuy (the
// buyer's rate limit, which buy.lua checks itself for Redis buys); the
// pause, read under the sale's lock; purchase tokens, by refusing. The
// buy is made in the engine sale home (the buyer's home segment of a
// segmented sale).
func (f *Seller) buyOnDB(ctx context.Context, b inventory.CheckedBuy, home string) (inventory.Receipt, error) {
	m, ok := f.dbSells()
	if !ok {
		return inventory.Receipt{}, ErrNobodySells
	}
	if b.Token() != "" {
		return inventory.Receipt{}, ErrTokensNeedRedis
	}
	if f.cfg.BeforeDatabaseBuy != nil {
		if err := f.cfg.BeforeDatabaseBuy(ctx, b); err != nil {
			return inventory.Receipt{}, err
		}
	}
	atHome, err := b.InSale(home)
	if err != nil {
		return inventory.Receipt{}, err
	}
	began := time.Now()
	rc, err := f.db.Buy(ctx, store.DegradedBuy{Epoch: m.Epoch, Buy: atHome, Now: time.Now()})
	if errors.Is(err, store.ErrModeChanged) {
		err = ErrNobodySells
	}
	if f.cfg.Observe != nil {
		f.cfg.Observe(err, time.Since(began), true)
	}
	return rc, err
}

// Cancel cancels an order where it was sold and may be changed now: in
// Redis, or in the database in degraded mode, or nowhere (ErrNobodySells).
// userID "" cancels as an operator.
func (f *Seller) Cancel(ctx context.Context, orderID, userID string) (inventory.Receipt, error) {
	var rc inventory.Receipt
	var err error
	if f.RedisSells() {
		rc, err = f.eng.Cancel(ctx, orderID, userID)
		if err == nil {
			f.acks.add(rc.Order)
			if f.cfg.Appended != nil {
				f.cfg.Appended(rc.Order.SaleID)
			}
		}
	} else if m, ok := f.dbSells(); ok {
		rc, err = f.db.Cancel(ctx, m.Epoch, orderID, userID, time.Now())
	} else {
		err = ErrNobodySells
	}
	if errors.Is(err, inventory.ErrFenced) || errors.Is(err, store.ErrModeChanged) {
		err = ErrNobodySells
	}
	return rc, err
}

// Pause pauses (or resumes) the sale where it sells: in Redis (the
// database follows through the stream), or, in degraded mode, in the
// database, whose buys read the flag under the sale's lock (Redis gets it
// with the repair that ends degraded mode). While nobody sells (the grace
// period after a switch, a recovery) it is ErrNobodySells: a recovery may
// have repaired the sale in Redis already.
func (f *Seller) Pause(ctx context.Context, saleID string, paused bool) error {
	if f.RedisSells() {
		if paused {
			return f.eng.Pause(ctx, saleID)
		}
		return f.eng.Resume(ctx, saleID)
	}
	m, _ := f.Sells()
	if m.Mode != store.ModeDB {
		return ErrNobodySells
	}
	ids, err := f.engineSales(ctx, saleID) // every segment of a segmented sale
	if err != nil {
		return err
	}
	for _, id := range ids {
		err := f.db.SetPaused(ctx, m.Epoch, id, paused, time.Now())
		if errors.Is(err, store.ErrModeChanged) {
			return ErrNobodySells
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// beginRedisBuy reports whether a buy goes to Redis, and if so counts it
// on its way until endRedisBuy. Once a tick has stopped the buys to Redis
// (set), no new one begins, and a hand-over waits for those under way.
func (f *Seller) beginRedisBuy() bool {
	f.redisBuys.Add(1)
	if f.RedisSells() {
		return true
	}
	f.redisBuys.Add(-1)
	return false
}

// endRedisBuy records how a buy sent to Redis ended: an order its buyer is
// told of (bought, or a replay) is an ack; a buy whose outcome is unknown
// (the request may have run in Redis, its reply lost) is kept as unsure,
// under the order id it was sent with. A new order's sale is told to
// Config.Bought.
func (f *Seller) endRedisBuy(buy inventory.CheckedBuy, rc inventory.Receipt, err error) {
	defer f.redisBuys.Add(-1)
	if err == nil && !rc.Replayed && f.cfg.Bought != nil {
		f.cfg.Bought(rc.Order.SaleID)
	}
	switch {
	case err == nil && buy.Token() != "" && !rc.Replayed:
		// The token goes with its order (a replay's was spent by the buy
		// that made the order, or by none).
		f.acks.addSpent(rc.Order, inventory.SpentToken{Token: buy.Token(), UserID: rc.Order.UserID, OrderID: rc.Order.ID,
			Until: rc.Order.CreatedAt.Add(buy.TokenTTL())})
	case err == nil:
		f.acks.add(rc.Order)
	case inventory.OutcomeUnknown(err):
		id := rc.Order.ID // the id the engine sent it under (it may choose another new one)
		if id == "" {
			id = buy.OrderID()
		}
		if id == "" {
			return
		}
		sale, _ := inventory.SaleOfOrder(id) // the home segment of a segmented sale
		f.acks.addUnsure(inventory.Order{ID: id, SaleID: sale, UserID: buy.UserID(), Status: inventory.OrderPending,
			Items: buy.Lines(), IdempotencyKey: buy.IdempotencyKey(), CreatedAt: time.Now().UTC()})
	}
}

// waitRedisBuys waits until no buy of this instance is on its way to
// Redis, for up to a tick (the tick wrote its heartbeat before), and reports
// whether none is.
func (f *Seller) waitRedisBuys(ctx context.Context) bool {
	deadline := time.Now().Add(f.tick)
	for f.redisBuys.Load() > 0 {
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(max(f.tick/20, time.Millisecond)):
		}
	}
	return true
}

// RedisDown reports whether err says Redis (or the database) did not
// answer: a dial error, a timeout, a broken or closed connection. Not a
// pool timeout: every connection of the client's pool stayed busy, so the
// command was never sent; that says the process is short of connections,
// not that Redis is away.
func RedisDown(err error) bool {
	var netErr net.Error
	if errors.Is(err, redis.ErrPoolTimeout) {
		return false
	}
	return errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, redis.ErrClosed) || errors.Is(err, syscall.ECONNREFUSED)
}
