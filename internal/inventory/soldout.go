package inventory

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/ttlcache"
)

// SoldOut tunes the in-process sold-out flags. When a buy leaves an item
// with nothing, or is refused because nothing is left, the engine flags the
// item, and Buy refuses the item's next buys with ErrSoldOut without a call
// to Redis: the crowd that arrives after a sell-out costs Redis nothing.
//
// A flag only ever refuses: it never sells. It lasts TTL, then the next buy
// asks Redis again, so stock that comes back (a cancel, a restock, on any
// instance) is sold again within TTL even if nothing else is heard. With
// WatchStock running, a cancel or restock on any instance clears the flag
// on every instance at once. A Cancel or Restock through this engine clears
// its own flags before it returns.
//
// Buys that carry an idempotency key are never refused by a flag: a retry
// must find the order it made.
type SoldOut struct {
	// Off asks Redis for every buy.
	Off bool
	// TTL bounds how long a flag refuses buys. Default 500ms.
	TTL time.Duration
	// MaxFlags bounds how many flags the engine keeps, one per item found
	// sold out: expired flags are dropped first, then arbitrary ones (a
	// dropped flag costs one call to Redis). Default 65536.
	MaxFlags int
}

// soldOutFlags holds an engine's flags: "<sale>\x00<sku>" until its expiry.
// epoch counts revocations, so that a reply from before a revocation does
// not set a flag after it.
type soldOutFlags struct {
	off   bool
	ttl   time.Duration
	clock Clock
	flags *ttlcache.Cache[struct{}]
	// mu orders mark against revoke: a flag is set only under the epoch it
	// was checked against.
	mu    sync.Mutex
	epoch atomic.Uint64
	// inFlight counts this engine's cancels and restocks under way: while
	// one is, its stock may be back already, so no flag refuses anything.
	inFlight atomic.Int64
	// Refused counts buys refused by a flag.
	refused atomic.Int64
}

func newSoldOutFlags(o SoldOut, clock Clock) *soldOutFlags {
	if o.TTL <= 0 {
		o.TTL = 500 * time.Millisecond
	}
	if clock == nil {
		clock = ClockFunc(time.Now)
	}
	if o.MaxFlags <= 0 {
		o.MaxFlags = 1 << 16
	}
	return &soldOutFlags{off: o.Off, ttl: o.TTL, clock: clock, flags: ttlcache.New[struct{}](o.MaxFlags)}
}

func flagKey(saleID, sku string) string { return saleID + "\x00" + sku }

// refuse returns a *SoldOutError naming the flagged skus of lines, or nil.
func (f *soldOutFlags) refuse(saleID string, lines []Line, idempotencyKey string) error {
	if f.off || idempotencyKey != "" || f.inFlight.Load() > 0 {
		return nil
	}
	var skus []string
	now := f.clock.Now().UnixNano()
	for _, l := range lines {
		if _, ok := f.flags.Get(flagKey(saleID, l.SKU), now); ok {
			skus = append(skus, l.SKU)
		}
	}
	if skus == nil {
		return nil
	}
	f.refused.Add(1)
	return &SoldOutError{SKUs: skus}
}

// mark flags an item Redis said has nothing left, unless stock may have
// come back since the call was sent (epoch moved on).
func (f *soldOutFlags) mark(saleID, sku string, epoch uint64) {
	if f.off {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.epoch.Load() == epoch {
		now := f.clock.Now()
		f.flags.Set(flagKey(saleID, sku), struct{}{}, now.Add(f.ttl).UnixNano(), now.UnixNano())
	}
}

// returning marks a call that may bring stock back as under way: no flag
// refuses a buy, and no reply from before it sets one, until the returned
// function has run, which clears the flags of the sale's skus (every sku
// when none are named).
func (f *soldOutFlags) returning() func(saleID string, skus ...string) {
	f.mu.Lock()
	f.inFlight.Add(1)
	f.epoch.Add(1)
	f.mu.Unlock()
	return func(saleID string, skus ...string) {
		f.revoke(saleID, skus...)
		f.inFlight.Add(-1)
	}
}

// revoke clears the flags of a sale's skus, or of every sku of the sale
// when skus is empty.
func (f *soldOutFlags) revoke(saleID string, skus ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.epoch.Add(1)
	if len(skus) == 0 {
		f.flags.DeletePrefix(saleID + "\x00")
		return
	}
	for _, sku := range skus {
		f.flags.Delete(flagKey(saleID, sku))
	}
}

// revokeAll clears every flag.
func (f *soldOutFlags) revokeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.epoch.Add(1)
	f.flags.Clear()
}

// SoldOutRefusals counts the buys this engine refused from its sold-out
// flags, without a call to Redis.
func (e *Engine) SoldOutRefusals() int64 { return e.soldOut.refused.Load() }

// StockChannel is the Redis Pub/Sub channel on which cancel and restock
// announce stock that came back, as "<sale>|<sku>,<sku>...".
func (e *Engine) StockChannel() string { return e.prefix + ":stock" }

// Subscriber is what WatchStock needs of a client: *redis.Client and
// *redis.ClusterClient have it.
type Subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// WatchStock listens on StockChannel until ctx ends and clears the sold-out
// flags of every item whose stock comes back, on whichever instance. Each
// (re)subscription clears every flag, since announcements may have been
// missed while the connection was down. Without it, flags still expire
// after SoldOut.TTL.
func (e *Engine) WatchStock(ctx context.Context, sub Subscriber) error {
	ps := sub.Subscribe(ctx, e.StockChannel())
	defer ps.Close()
	// go-redis resubscribes after a lost connection and sends the
	// subscription again: the flags are cleared on each.
	msgs := ps.ChannelWithSubscriptions()
	for {
		select {
		case <-ctx.Done():
			return nil
		case msg, ok := <-msgs:
			if !ok {
				return nil
			}
			switch m := msg.(type) {
			case *redis.Subscription:
				e.soldOut.revokeAll()
			case *redis.Message:
				if sale, skus, ok := strings.Cut(m.Payload, "|"); ok {
					e.soldOut.revoke(sale, strings.Split(skus, ",")...)
				}
			}
		}
	}
}
