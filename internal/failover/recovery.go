package failover

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/store"
)

// fleetFlushed reports whether every instance seen within the grace period
// has handed over its acks for epoch.
func (f *Seller) fleetFlushed(ctx context.Context, epoch int64, now time.Time) bool {
	ins, err := f.db.Instances(ctx, now.Add(-f.grace))
	if err != nil {
		return false
	}
	for _, in := range ins {
		if in.FlushedEpoch < epoch {
			return false
		}
	}
	return true
}

// flush hands the database the orders this instance acknowledged from
// Redis lately, and the buys whose outcome it never learned (unsure), and
// likewise the halves of moves between segments; the database sells only
// after every instance has. It first waits for the buys and moves still on
// their way to Redis (none begins once the mode is not redis): each one's
// order, move or unknown outcome is then in the hand-over.
// For a recovery (recovering), it also waits for the order consumer's
// rounds under way (Parts.Rounds): what they read is then in the database,
// or still in a stream the recovery waits on. Not for a switch to the
// database: Redis may be gone with the consumer's read waiting on it (up
// to its read timeout), and the database must begin selling on time.
func (f *Seller) flush(ctx context.Context, epoch int64, recovering bool) {
	if !f.waitRedisBuys(ctx) {
		f.log.Warn("degraded mode: buys still on their way to redis; handing over at the next tick", "buys", f.redisBuys.Load())
		return
	}
	// A round ends by itself (a read, bounded by the consumer's read
	// timeout, and writes that commit or fail), as the database writes
	// below do: no deadline of our own.
	if recovering && f.rounds != nil {
		if err := f.rounds(ctx); err != nil {
			return
		}
	}
	orders, spent, unsure, err := f.acks.snapshot()
	if err != nil {
		f.log.Error("degraded mode: read the acknowledged orders; not handing over", "err", err)
		return
	}
	if err := f.db.AdoptOrders(ctx, orders); err != nil {
		if ctx.Err() == nil {
			f.log.Warn("degraded mode: hand over acknowledged orders", "orders", len(orders), "err", err)
		}
		return
	}
	// The purchase tokens their buys spent stay spent, should Redis come
	// back without them (and without the stream that carried them).
	if len(spent) > 0 {
		if err := f.db.AdoptSpentTokens(ctx, spent); err != nil {
			if ctx.Err() == nil {
				f.log.Warn("degraded mode: hand over spent purchase tokens", "tokens", len(spent), "err", err)
			}
			return
		}
	}
	if err := f.db.MarkUnsure(ctx, unsure); err != nil {
		if ctx.Err() == nil {
			f.log.Warn("degraded mode: hand over buys of unknown outcome", "buys", len(unsure), "err", err)
		}
		return
	}
	// The moves between segments too: a half still in its stream is
	// counted before the database sells the units it moved.
	moves, unsureMoves := f.acks.moveSnapshot()
	if err := f.db.AdoptMoves(ctx, moves, unsureMoves); err != nil {
		if ctx.Err() == nil {
			f.log.Warn("degraded mode: hand over moves", "moves", len(moves), "unsure", len(unsureMoves), "err", err)
		}
		return
	}
	f.acks.handedOver(len(unsure), len(unsureMoves))
	f.mu.Lock()
	f.flushed = max(f.flushed, epoch)
	f.mu.Unlock()
	f.log.Info("degraded mode: acknowledged orders handed to the database", "orders", len(orders), "unsure", len(unsure),
		"moves", len(moves), "unsure_moves", len(unsureMoves), "epoch", epoch)
}

// fenceAll fences every sale off in Redis for the degraded epoch.
func (f *Seller) fenceAll(ctx context.Context, epoch int64) {
	ids, err := f.db.SaleIDs(ctx)
	if err != nil {
		return
	}
	for _, id := range ids {
		if _, err := f.eng.Fence(ctx, id, epoch); err != nil {
			if ctx.Err() == nil {
				f.log.Warn("degraded mode: fence a sale in redis", "sale", id, "err", err)
			}
			return
		}
	}
	f.mu.Lock()
	f.fencedEpoch = max(f.fencedEpoch, epoch)
	f.mu.Unlock()
	f.log.Info("degraded mode: every sale fenced off in redis", "sales", len(ids), "epoch", epoch)
}

// Recover brings Redis back as the seller for the recovering mode m (Step
// calls it; tests may call it themselves): with nobody selling, it waits until the stream holds nothing unapplied, repairs
// every sale in Redis from the database, lifts the fences, and switches to
// redis. Whatever fails leaves the mode recovering for the next tick.
func (f *Seller) Recover(ctx context.Context, m store.SellMode) {
	if !f.everyoneFlushed(ctx, m.Epoch) {
		return
	}
	ids, err := f.db.SaleIDs(ctx)
	if err != nil {
		return
	}
	snapshot := inventory.LoaderFunc(f.db.Snapshot)
	for _, id := range ids {
		// Another instance may have finished meanwhile: fencing now would
		// shut a sale Redis sells again.
		if cur, err := f.db.SellMode(ctx); err != nil || cur.Epoch != m.Epoch {
			return
		}
		// Fence first: a sale rebuilt or restored meanwhile sells nothing
		// until it is repaired.
		if _, err := f.eng.Fence(ctx, id, m.Epoch); err != nil {
			f.log.Warn("degraded mode: recover: fence", "sale", id, "err", err)
			return
		}
		deadline := time.Now().Add(10 * f.grace)
		for {
			inflight, err := f.streams.InFlight(ctx, id)
			if err == nil && len(inflight) == 0 {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				f.log.Warn("degraded mode: recover: events still in flight", "sale", id, "events", len(inflight), "err", err)
				return
			}
			time.Sleep(f.tick / 10)
		}
		// The stream holds nothing more of the sale: an unsure buy that did
		// not arrive (voided) was not made, or was lost with Redis.
		if err := f.db.SettleUnsure(ctx, id); err != nil {
			f.log.Warn("degraded mode: recover: settle buys of unknown outcome", "sale", id, "err", err)
			return
		}
		rep, err := f.eng.Repair(ctx, id, snapshot)
		if err != nil && !errors.Is(err, inventory.ErrNotFound) {
			f.log.Warn("degraded mode: recover: repair", "sale", id, "err", err)
			return
		}
		if err == nil && len(rep.Changes) > 0 {
			if jerr := f.db.JournalRepair(ctx, rep, "degraded mode ended (epoch "+strconv.FormatInt(m.Epoch, 10)+")", time.Now()); jerr != nil {
				f.log.Warn("degraded mode: recover: journal the repair", "sale", id, "err", jerr)
			}
		}
		if err := f.eng.Unfence(ctx, id, m.Epoch); err != nil { // a later period's fence stays
			f.log.Warn("degraded mode: recover: unfence", "sale", id, "err", err)
			return
		}
	}
	if _, ok := f.switchTo(ctx, m, store.ModeRedis, time.Now(), time.Time{}, "redis repaired from the database"); ok {
		// The switch let go of the hold (set → release) and vouched for
		// the nodes in memory; write them now. The next tick's loadTrust
		// replaces the trust in memory with the database's: with the old
		// run ids still there, a node check before that tick's trustSeen
		// would hold the repaired node back again, for another recovery.
		// Also, an instance starting meanwhile would recover it again.
		f.trustSeen(ctx)
	}
}

// liftStaleFence lifts the sale's fence if it is older than the mode's
// epoch while Redis sells (a recovery that died half way, or one that raced
// another and fenced after it finished), and reports whether it did.
func (f *Seller) liftStaleFence(ctx context.Context, saleID string) bool {
	m, err := f.db.SellMode(ctx)
	if err != nil || m.Mode != store.ModeRedis {
		return false
	}
	lifted, err := f.eng.LiftStaleFence(ctx, saleID, m.Epoch)
	if err == nil && lifted {
		f.log.Warn("degraded mode: lifted a stale fence", "sale", saleID, "epoch", m.Epoch)
	}
	return err == nil && lifted
}

// everyoneFlushed hands over this instance's acks for epoch, then waits
// (up to ten grace periods) until every instance seen lately has too: the
// orders Redis acknowledged and may have lost are then in the database, and
// the repair counts them. An instance that never does is logged and passed
// over: it is not answering its ticks.
func (f *Seller) everyoneFlushed(ctx context.Context, epoch int64) bool {
	if f.flushedEpoch() < epoch {
		f.flush(ctx, epoch, true)
		if f.flushedEpoch() < epoch {
			return false
		}
	}
	deadline := time.Now().Add(10 * f.grace)
	for {
		now := time.Now()
		ins, err := f.db.Instances(ctx, now.Add(-f.grace))
		if err != nil {
			return false
		}
		var behind []string
		for _, in := range ins {
			// This instance has handed over (above); its row may say so
			// only at its next heartbeat.
			if in.FlushedEpoch < epoch && in.Name != f.name {
				behind = append(behind, in.Name)
			}
		}
		if len(behind) == 0 {
			return true
		}
		if now.After(deadline) {
			f.log.Warn("degraded mode: recover: instances did not hand over their acknowledged orders; going on", "instances", behind)
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(min(f.tick/2, time.Until(deadline)+time.Millisecond)):
		}
	}
}
