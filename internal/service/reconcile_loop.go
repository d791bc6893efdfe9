package service

import (
	"context"
	"errors"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/reconcile"
	"github.com/seckill/seckill/internal/store"
)

// The reconciliation loop: every Config.ReconcileEvery it compares Redis,
// the order stream and the database for the live sales due (every one at
// least every sweepOf(live sales); see pass). Each pass's drift feeds
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

// reconcileSweep: every live sale is reconciled at least this often (every
// pass, when Config.ReconcileEvery is longer) while the live sales are at
// most idleVisitsPerSecond × reconcileSweep (1,200); more take longer, see
// sweepOf. A pass visits a share of the live sales, round-robin, so that a
// thousand of them cost a steady trickle, not a thousand reconciliations
// every period.
const reconcileSweep = time.Minute

// idleVisitsPerSecond bounds the visits of sales that did not move, over
// the passes: at most idleVisitsPerSecond × Config.ReconcileEvery a pass.
// A visit is several Redis commands and a query of the database: ten
// thousand idle live sales swept every minute were 170 visits a second.
var idleVisitsPerSecond = 20

// sweepOf is how long a sweep of n live sales that do not move takes:
// reconcileSweep, or as long as visiting them at idleVisitsPerSecond
// takes, whichever is longer (10,000 sales: 500 s).
func sweepOf(n int) time.Duration {
	return max(reconcileSweep, time.Duration(n)*time.Second/time.Duration(max(idleVisitsPerSecond, 1)))
}

// reconciler is what the loop remembers from one pass to the next.
type reconciler struct {
	s *Service
	// drifted holds the sales the previous pass found drift in.
	drifted map[string]bool
	// live holds the sales the previous pass found live.
	live map[string]bool
	// visited holds, per live sale, when it was last reconciled (zero:
	// never) and its stream's position then (see streamMarks); and when the
	// loop first saw it live.
	visited map[string]visited
	// epoch is the sell mode's epoch the previous pass judged drift in
	// (-1: it judged none).
	epoch int64
}

type visited struct {
	at, seen time.Time
	mark     string
	// next: no visit of the sale begins before it (see visitShare).
	next time.Time
}

// visitShare paces the visits of a sale by what they cost: a visit that
// took d is followed by the sale's next no sooner than visitShare × d
// after it ends, so that the loop spends at most about 1/visitShare of
// its time on any one sale. A visit reads every order record and per-user
// count the sale holds in Redis (reconcile.Sale), so its cost grows with
// the sale: without this, a sale of millions of orders was read in full
// at every pass it moved in, and its visits took more of the service and
// of Redis the longer it sold. A sale of a million orders (about a
// second a visit here) is so visited about once a minute, twenty million
// about every twenty minutes. A pause no longer than a period, nor than
// minVisitPause, is none: a sale whose visit takes a second or less (one
// of up to about a million orders) is visited as if its visits cost
// nothing. A drift found waits for the next visit too, and is repaired if
// that one finds it again.
//
// What is timed is the visit's read of the sale (reconcile.Sale), not a
// repair that follows (two more reads), and only when it succeeded: a
// visit that failed (Redis or the database away, perhaps after minutes of
// timeouts) read nothing of the sale's size and asks for no pause. A pause
// is at most maxVisitPause, since a read slowed by a Redis or a database
// under strain, not by the sale's size, would otherwise keep the sale
// from the loop for 60 times the strain, right when drift is likeliest;
// and a switch of the sell mode's epoch (an outage, a recovery) ends
// every pause (see pass).
const (
	visitShare    = 60
	minVisitPause = time.Minute
	maxVisitPause = 30 * time.Minute // a visit of 30 s: thirty million orders or so
)

// pauseAfter is how long after a visit that took took the sale's next may
// begin, with the loop's period every (see visitShare): 0 for no pause.
func pauseAfter(took, every time.Duration) time.Duration {
	if pause := visitShare * took; pause > max(every, minVisitPause) {
		return min(pause, maxVisitPause)
	}
	return 0
}

func newReconciler(s *Service) *reconciler {
	return &reconciler{s: s, drifted: map[string]bool{}, live: map[string]bool{}, visited: map[string]visited{}, epoch: -1}
}

// pass reconciles the live sales (not ended and drained) due this pass, and
// repairs the ones that drifted in this pass and the one before. A sale that
// has ended and is drained changes no more: it costs the loop nothing. With
// n live sales, sweep = sweepOf(n) (a minute up to 1,200 of them, n ÷ 20 s
// past that) and the budget n × ReconcileEvery / sweep (at most
// idleVisitsPerSecond × ReconcileEvery), each pass visits:
//
//   - every sale the previous pass found drift in (so that drift two passes
//     in a row find is repaired a period after it was first found), and
//     every sale that was live at the previous pass and is no more (a last
//     pass after its stream drained);
//   - up to the budget of sales whose stream moved since their last visit
//     (a buy, a cancel, a pay...), the longest unvisited first. Only the
//     streams of the sales that moved lately as far as this instance knows
//     (markReader.moving: changed through it, or read by its consumer) are
//     looked at, one command each, in one pipeline; a sale changed through
//     another instance, whose entries another consumer read, is visited in
//     its turn below;
//   - and the others visited longest ago: every one that would otherwise
//     go unreconciled for longer than sweep, and more up to the budget,
//     idleVisitsPerSecond × ReconcileEvery at most in all.
//
// A sale whose last visit asks for a pause (visitShare) is none of these
// until it ends: a visit reads every order of the sale.
//
// So idle sales cost a budget of visits per pass, busy ones up to twice
// that; a sale that moved through this instance is visited at the next
// pass (within the budget); and drift that appears without a change of
// the stream (Redis data lost, a hand edit, a change through another
// instance) is found within sweep: a minute, or live sales ÷ 20 s when
// there are more than 1,200.
//
// The sales are visited evenly over half the period.
func (rc *reconciler) pass(ctx context.Context) {
	mode, err := rc.s.db.SellMode(ctx)
	if err != nil {
		return // the database is away; the live view says so
	}
	if mode.Mode != store.ModeRedis || rc.s.seller.HeldBack() {
		// Not drift: the recovery brings Redis back to the database.
		clear(rc.drifted)
		rc.epoch = -1
		return
	}
	if mode.Epoch != rc.epoch {
		clear(rc.drifted) // found before a switch: not this epoch's drift
		rc.epoch = mode.Epoch
		for id, v := range rc.visited { // a new epoch ends every pause (see visitShare)
			v.next = time.Time{}
			rc.visited[id] = v
		}
	}
	ids, err := rc.s.liveSaleIDs(ctx)
	if err != nil {
		return // the database is away; the live view says so
	}
	live := make(map[string]bool, len(ids))
	for _, id := range ids {
		live[id] = true
	}
	visit := rc.choose(ctx, ids, live, time.Now())
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
		start := time.Now()
		var took time.Duration
		drifted[id], took = rc.sale(ctx, id)
		if live[id] {
			v := rc.visited[id]
			v.at, v.mark, v.next = start, visit[id], time.Time{}
			if pause := pauseAfter(took, rc.s.cfg.ReconcileEvery); pause > 0 {
				v.next = time.Now().Add(pause)
			}
			rc.visited[id] = v
		}
	}
	// A drift found by a visit whose sale is not due again yet waits for
	// its next visit (see visitShare).
	for id, d := range rc.drifted {
		if _, seen := visit[id]; d && !seen && live[id] {
			drifted[id] = true
		}
	}
	maps.DeleteFunc(rc.visited, func(id string, _ visited) bool { return !live[id] })
	rc.drifted, rc.live = drifted, live
}

// choose returns the sales this pass visits (see pass), each with its
// stream's position as read before the visit (unknownMark: not known).
// It reads the marks of the sales that moved lately as far as this
// instance knows and of the ones it chooses, no others.
func (rc *reconciler) choose(ctx context.Context, ids []string, live map[string]bool, now time.Time) map[string]string {
	visit := map[string]string{}
	for id := range rc.live {
		if !live[id] {
			visit[id] = ""
		}
	}
	// paced: a live sale whose last visit asks for a pause (visitShare).
	paced := func(id string) bool { return now.Before(rc.visited[id].next) }
	for id, d := range rc.drifted {
		if d && !(live[id] && paced(id)) {
			visit[id] = ""
		}
	}
	every := rc.s.cfg.ReconcileEvery
	sweep := sweepOf(len(ids))
	budget, most := len(ids), len(ids) // most: visits of unmoved sales
	if every > 0 && every < sweep {
		budget = int((int64(len(ids))*int64(every) + int64(sweep) - 1) / int64(sweep))
	}
	if every > 0 {
		most = max(int(math.Ceil(float64(idleVisitsPerSecond)*every.Seconds())), 1)
	}
	m := rc.s.marks(ctx)
	var moving, rest []string
	for _, id := range ids {
		if _, ok := rc.visited[id]; !ok {
			rc.visited[id] = visited{seen: now, mark: unknownMark}
		}
		switch _, ok := visit[id]; {
		case ok, paced(id):
		case m.moving(id):
			moving = append(moving, id)
		default:
			rest = append(rest, id)
		}
	}
	look := slices.Clone(moving) // the marks to read: of these, and of the live sales chosen so far
	for id := range visit {
		if live[id] {
			look = append(look, id)
		}
	}
	marks, _ := m.read(ctx, look)
	for id := range visit {
		visit[id] = marks[id] // "" for a sale no longer live: its mark is not kept
	}
	// last is when a sale was visited last, or first seen if never.
	last := func(id string) time.Time {
		if v := rc.visited[id]; !v.at.IsZero() {
			return v.at
		}
		return rc.visited[id].seen
	}
	oldest := func(a, b string) int { return last(a).Compare(last(b)) }
	var moved []string
	for _, id := range moving {
		if marks[id] != rc.visited[id].mark {
			moved = append(moved, id)
		} else {
			rest = append(rest, id)
		}
	}
	slices.SortStableFunc(moved, oldest)
	moved = moved[:min(len(moved), budget)]
	for _, id := range moved {
		visit[id] = marks[id]
	}
	// The rest, longest unvisited first: the ones due (the next pass would
	// come too late for them), at least the budget, never more than most.
	// The moved ones take none of it: the sweep keeps its pace whatever
	// moves, and each sale waits at most ⌈n / budget⌉ passes.
	slices.SortStableFunc(rest, oldest)
	due := 0
	for _, id := range rest {
		if every > 0 && !now.Add(every).After(last(id).Add(sweep)) {
			break
		}
		due++
	}
	rest = rest[:min(max(due, budget), most, len(rest))]
	var unread []string
	for _, id := range rest {
		if mark, ok := marks[id]; ok {
			visit[id] = mark
		} else {
			unread = append(unread, id)
		}
	}
	marks, _ = m.read(ctx, unread)
	for _, id := range unread {
		visit[id] = marks[id]
	}
	return visit
}

// sale reconciles one sale and reports whether drift remains, and how
// long its read of the sale took (0 if it failed): the visit's cost, see
// visitShare.
func (rc *reconciler) sale(ctx context.Context, id string) (drift bool, took time.Duration) {
	s := rc.s
	start := time.Now()
	rep, err := reconcile.Sale(ctx, s.eng, s.rdb, s.db, id)
	if err != nil {
		return false, 0 // an archived sale's last pass among them: its series are gone (live_bounds.go)
	}
	took = time.Since(start)
	if inventory.PendingOut(rep.Moves) {
		// A move out of this segment whose arrival is not confirmed: one
		// under way, or one left pending whose note was lost (moves.go).
		// Finishing it again changes nothing.
		if _, err := s.eng.FinishMoves(ctx, id); err != nil && ctx.Err() == nil && !errors.Is(err, inventory.ErrFenced) {
			s.log.Warn("reconcile: a move left pending is not finished yet", "sale", id, "err", err)
		}
	}
	repairs := s.metrics.repairs.WithLabelValues(id) // every sale's count exists from 0
	rc.publish(rep)
	if !rep.Drifted() || !rc.drifted[id] {
		return rep.Drifted(), took
	}
	res, err := reconcile.Repair(ctx, s.eng, s.rdb, s.db, id)
	if len(res.Changes) > 0 {
		s.live.dirty.Store(id, struct{}{}) // the live view reads it again
		repairs.Inc()
		s.log.Warn("reconcile: repaired drift from the database", "sale", id, "changes", reconcile.Describe(res.Changes))
	}
	switch {
	case err != nil:
		if ctx.Err() == nil {
			s.log.Error("reconcile: repair failed", "sale", id, "err", err)
		}
		return true, took
	case res.Skipped != "":
		s.log.Warn("reconcile: drift not repaired", "sale", id, "reason", res.Skipped)
	}
	rc.publish(res.After)
	return res.After.Drifted(), took
}

// publish hands a pass's drift to the live view.
func (rc *reconciler) publish(rep reconcile.Report) {
	for _, it := range rep.Items {
		rc.s.live.drift.Store(rep.Sale+"|"+it.SKU, [2]int64{it.Drift, it.StockDrift})
	}
}
