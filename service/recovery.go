package service

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/seckill/seckill/inventory"
	"github.com/seckill/seckill/pipeline"
	"github.com/seckill/seckill/store"
)

// fleetFlushed reports whether every instance seen within the grace period
// has handed over its acks for epoch.
func (d *degraded) fleetFlushed(ctx context.Context, epoch int64, now time.Time) bool {
	ins, err := d.s.db.Instances(ctx, now.Add(-d.grace))
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
// Redis lately, and the buys whose outcome it never learned (unsure); the
// database sells only after every instance has. It first waits for the
// buys still on their way to Redis (none begins once the mode is not
// redis): each one's order or unknown outcome is then in the hand-over.
func (d *degraded) flush(ctx context.Context, epoch int64) {
	if !d.waitRedisBuys(ctx) {
		d.s.log.Warn("degraded mode: buys still on their way to redis; handing over at the next tick", "buys", d.redisBuys.Load())
		return
	}
	orders, unsure := d.acks.snapshot()
	if err := d.s.db.AdoptOrders(ctx, orders); err != nil {
		if ctx.Err() == nil {
			d.s.log.Warn("degraded mode: hand over acknowledged orders", "orders", len(orders), "err", err)
		}
		return
	}
	if err := d.s.db.MarkUnsure(ctx, unsure); err != nil {
		if ctx.Err() == nil {
			d.s.log.Warn("degraded mode: hand over buys of unknown outcome", "buys", len(unsure), "err", err)
		}
		return
	}
	d.acks.handedOver(len(unsure))
	d.mu.Lock()
	d.flushed = max(d.flushed, epoch)
	d.mu.Unlock()
	d.s.log.Info("degraded mode: acknowledged orders handed to the database", "orders", len(orders), "unsure", len(unsure), "epoch", epoch)
}

// fenceAll fences every sale off in Redis for the degraded epoch.
func (d *degraded) fenceAll(ctx context.Context, epoch int64) {
	ids, err := d.s.db.SaleIDs(ctx)
	if err != nil {
		return
	}
	for _, id := range ids {
		if _, err := d.s.eng.Fence(ctx, id, epoch); err != nil {
			if ctx.Err() == nil {
				d.s.log.Warn("degraded mode: fence a sale in redis", "sale", id, "err", err)
			}
			return
		}
	}
	d.mu.Lock()
	d.fencedEpoch = max(d.fencedEpoch, epoch)
	d.mu.Unlock()
	d.s.log.Info("degraded mode: every sale fenced off in redis", "sales", len(ids), "epoch", epoch)
}

// recover brings Redis back as the seller: with nobody selling (mode
// recovering), it waits until the stream holds nothing unapplied, repairs
// every sale in Redis from the database, lifts the fences, and switches to
// redis. Whatever fails leaves the mode recovering for the next tick.
func (d *degraded) recover(ctx context.Context, m store.SellMode) {
	if !d.everyoneFlushed(ctx, m.Epoch) {
		return
	}
	ids, err := d.s.db.SaleIDs(ctx)
	if err != nil {
		return
	}
	snapshot := inventory.LoaderFunc(d.s.db.Snapshot)
	for _, id := range ids {
		// Another instance may have finished meanwhile: fencing now would
		// shut a sale Redis sells again.
		if cur, err := d.s.db.SellMode(ctx); err != nil || cur.Epoch != m.Epoch {
			return
		}
		// Fence first: a sale rebuilt or restored meanwhile sells nothing
		// until it is repaired.
		if _, err := d.s.eng.Fence(ctx, id, m.Epoch); err != nil {
			d.s.log.Warn("degraded mode: recover: fence", "sale", id, "err", err)
			return
		}
		deadline := time.Now().Add(10 * d.grace)
		for {
			inflight, err := pipeline.InFlight(ctx, d.s.rdb, d.s.eng, id)
			if err == nil && len(inflight) == 0 {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				d.s.log.Warn("degraded mode: recover: events still in flight", "sale", id, "events", len(inflight), "err", err)
				return
			}
			time.Sleep(d.tick / 10)
		}
		// The stream holds nothing more of the sale: an unsure buy that did
		// not arrive (voided) was not made, or was lost with Redis.
		if err := d.s.db.SettleUnsure(ctx, id); err != nil {
			d.s.log.Warn("degraded mode: recover: settle buys of unknown outcome", "sale", id, "err", err)
			return
		}
		rep, err := d.s.eng.Repair(ctx, id, snapshot)
		if err != nil && !errors.Is(err, inventory.ErrNotFound) {
			d.s.log.Warn("degraded mode: recover: repair", "sale", id, "err", err)
			return
		}
		if err == nil && len(rep.Changes) > 0 {
			if jerr := d.s.db.JournalRepair(ctx, rep, "degraded mode ended (epoch "+strconv.FormatInt(m.Epoch, 10)+")", time.Now()); jerr != nil {
				d.s.log.Warn("degraded mode: recover: journal the repair", "sale", id, "err", jerr)
			}
		}
		if err := d.s.eng.Unfence(ctx, id, m.Epoch); err != nil { // a later period's fence stays
			d.s.log.Warn("degraded mode: recover: unfence", "sale", id, "err", err)
			return
		}
	}
	d.switchTo(ctx, m, store.ModeRedis, time.Now(), time.Time{}, "redis repaired from the database")
}

// liftStaleFence lifts the sale's fence if it is older than the mode's
// epoch while Redis sells (a recovery that died half way, or one that raced
// another and fenced after it finished), and reports whether it did.
func (d *degraded) liftStaleFence(ctx context.Context, saleID string) bool {
	m, err := d.s.db.SellMode(ctx)
	if err != nil || m.Mode != store.ModeRedis {
		return false
	}
	lifted, err := d.s.eng.LiftStaleFence(ctx, saleID, m.Epoch)
	if err == nil && lifted {
		d.s.log.Warn("degraded mode: lifted a stale fence", "sale", saleID, "epoch", m.Epoch)
	}
	return err == nil && lifted
}

// everyoneFlushed hands over this instance's acks for epoch, then waits
// (up to ten grace periods) until every instance seen lately has too: the
// orders Redis acknowledged and may have lost are then in the database, and
// the repair counts them. An instance that never does is logged and passed
// over: it is not answering its ticks.
func (d *degraded) everyoneFlushed(ctx context.Context, epoch int64) bool {
	if d.flushedEpoch() < epoch {
		d.flush(ctx, epoch)
		if d.flushedEpoch() < epoch {
			return false
		}
	}
	deadline := time.Now().Add(10 * d.grace)
	for {
		now := time.Now()
		ins, err := d.s.db.Instances(ctx, now.Add(-d.grace))
		if err != nil {
			return false
		}
		var behind []string
		for _, in := range ins {
			if in.FlushedEpoch < epoch {
				behind = append(behind, in.Name)
			}
		}
		if len(behind) == 0 {
			return true
		}
		if now.After(deadline) {
			d.s.log.Warn("degraded mode: recover: instances did not hand over their acknowledged orders; going on", "instances", behind)
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d.tick / 2):
		}
	}
}
