package service

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/seckill/seckill/reconcile"
	"github.com/seckill/seckill/store"
)

// The reconciliation loop: every Config.ReconcileEvery it compares Redis,
// the order stream and the database for every live sale. Each pass's drift feeds
// the live view (the dashboard and the seckill_reconcile_*drift gauges).
// Drift that two passes in a row find is repaired from the database
// (reconcile.Repair: journaled, never while orders are in flight): under
// load the three sources are read at slightly different moments, so one
// pass alone can see numbers in motion. Each repair is one log line and
// counts in seckill_reconcile_repairs_total.
//
// Only while Redis sells: in degraded mode (the database sells, or Redis is
// being recovered), and while this instance holds Redis back after seeing
// it restart, the database is ahead of Redis by design and the recovery
// repairs Redis once nobody sells; a pass then judges nothing, and drift a
// pass found before a switch does not count with one after it (the two
// passes that repair are of one epoch of the sell mode). reconcile.Repair
// checks the mode again around its read of the database.

// reconcileLoop runs a pass every period until ctx ends.
func (s *Service) reconcileLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.ReconcileEvery)
	defer t.Stop()
	rc := newReconciler(s)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rc.pass(ctx)
	}
}

// reconciler is what the loop remembers from one pass to the next.
type reconciler struct {
	s *Service
	// drifted holds the sales the previous pass found drift in.
	drifted map[string]bool
	// live holds the sales the previous pass found live.
	live map[string]bool
	// epoch is the sell mode's epoch the previous pass judged drift in
	// (-1: it judged none).
	epoch int64
}

func newReconciler(s *Service) *reconciler {
	return &reconciler{s: s, drifted: map[string]bool{}, live: map[string]bool{}, epoch: -1}
}

// pass reconciles every live sale once (not ended and drained; plus the
// ones that were live at the previous pass, so that each has a last pass
// after its stream drained, and the ones that drifted), and repairs the
// ones that drifted in this pass and the one before. A sale that has ended
// and is drained changes no more: it costs the loop nothing. The sales are
// visited evenly over half the period.
func (rc *reconciler) pass(ctx context.Context) {
	mode, err := rc.s.db.SellMode(ctx)
	if err != nil {
		return // the database is away; the live view says so
	}
	if mode.Mode != store.ModeRedis || rc.s.deg.heldBack() {
		// Not drift: the recovery brings Redis back to the database.
		clear(rc.drifted)
		rc.epoch = -1
		return
	}
	if mode.Epoch != rc.epoch {
		clear(rc.drifted) // found before a switch: not this epoch's drift
		rc.epoch = mode.Epoch
	}
	ids, err := rc.s.liveSaleIDs(ctx)
	if err != nil {
		return // the database is away; the live view says so
	}
	live := make(map[string]bool, len(ids))
	for _, id := range ids {
		live[id] = true
	}
	visit := maps.Clone(live)
	maps.Copy(visit, rc.live)
	for id, d := range rc.drifted {
		visit[id] = visit[id] || d
	}
	drifted := make(map[string]bool, len(visit))
	// Paced over half the period: a thousand live sales are a steady
	// trickle of reads, not a burst every period that buys queue behind.
	var gap time.Duration
	if every := rc.s.cfg.ReconcileEvery; every > 0 && len(visit) > 0 {
		gap = every / 2 / time.Duration(len(visit))
	}
	for i, id := range slices.Sorted(maps.Keys(visit)) {
		if i > 0 && gap > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(gap):
			}
		}
		if ctx.Err() != nil {
			return
		}
		if !visit[id] {
			continue
		}
		drifted[id] = rc.sale(ctx, id)
	}
	rc.drifted, rc.live = drifted, live
}

// sale reconciles one sale and reports whether drift remains.
func (rc *reconciler) sale(ctx context.Context, id string) bool {
	s := rc.s
	repairs := s.metrics.repairs.WithLabelValues(id) // every sale's count exists from 0
	rep, err := reconcile.Sale(ctx, s.eng, s.rdb, s.db, id)
	if err != nil {
		return false
	}
	rc.publish(rep)
	if !rep.Drifted() || !rc.drifted[id] {
		return rep.Drifted()
	}
	res, err := reconcile.Repair(ctx, s.eng, s.rdb, s.db, id)
	if len(res.Changes) > 0 {
		repairs.Inc()
		s.log.Warn("reconcile: repaired drift from the database", "sale", id, "changes", reconcile.Describe(res.Changes))
	}
	switch {
	case err != nil:
		if ctx.Err() == nil {
			s.log.Error("reconcile: repair failed", "sale", id, "err", err)
		}
		return true
	case res.Skipped != "":
		s.log.Warn("reconcile: drift not repaired", "sale", id, "reason", res.Skipped)
	}
	rc.publish(res.After)
	return res.After.Drifted()
}

// publish hands a pass's drift to the live view.
func (rc *reconciler) publish(rep reconcile.Report) {
	for _, it := range rep.Items {
		rc.s.live.drift.Store(rep.Sale+"|"+it.SKU, [2]int64{it.Drift, it.StockDrift})
	}
}
