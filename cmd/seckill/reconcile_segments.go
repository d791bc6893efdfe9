package main

import (
	"context"
	"fmt"
	"io"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/reconcile"
	"github.com/seckill/seckill/internal/store"
)

// reconcileSegmented is runReconcile of a segmented sale (package
// segment): each segment is an ordinary sale, reconciled (and repaired)
// alone; the pass of the sale is their sum (reconcile.Combine), which
// drifts too while units are on their way between segments (a move left
// pending). --repair finishes such moves first. Exit status as
// runReconcile's.
func reconcileSegmented(ctx context.Context, eng *inventory.Engine, rdb redis.UniversalClient, db *store.Store,
	sale string, segs []string, repair bool, stdout, stderr io.Writer) int {
	reps := make([]reconcile.Report, 0, len(segs))
	drifted := false
	archived := 0
	if repair {
		// Every segment's moves first: a segment reconciled before a move
		// into it arrives would read it still moving.
		for _, seg := range segs {
			if st, err := db.Archive(ctx, seg); err == nil && !st.ArchivedAt.IsZero() {
				continue
			}
			if n, err := eng.FinishMoves(ctx, seg); err != nil {
				fmt.Fprintf(stderr, "seckill reconcile: a move out of %s is pending and not finished: %v\n", seg, err)
			} else if n > 0 {
				fmt.Fprintf(stdout, "finished %d moves out of %s left pending\n", n, seg)
			}
		}
	}
	for _, seg := range segs {
		// An archived segment is the database's alone: nothing to compare
		// (and nothing in Redis to repair).
		if st, err := db.Archive(ctx, seg); err == nil && !st.ArchivedAt.IsZero() {
			rep, err := reconcile.Archived(ctx, db, seg)
			if err != nil {
				fmt.Fprintln(stderr, "seckill reconcile:", err)
				return 1
			}
			archived++
			reps = append(reps, rep)
			continue
		}
		if repair {
			res, err := reconcile.Repair(ctx, eng, rdb, db, seg)
			if err != nil {
				fmt.Fprintln(stderr, "seckill reconcile:", err)
				return 1
			}
			if len(res.Changes) > 0 {
				reconcile.PrintRepair(stdout, res)
			}
			drifted = drifted || res.After.Drifted()
			reps = append(reps, res.After)
			continue
		}
		rep, err := reconcile.Sale(ctx, eng, rdb, db, seg)
		if err != nil {
			fmt.Fprintln(stderr, "seckill reconcile:", err)
			return 1
		}
		drifted = drifted || rep.Drifted()
		reps = append(reps, rep)
	}
	if archived == len(segs) {
		fmt.Fprintf(stdout, "sale %s is archived: its keys are gone from Redis and the database alone holds it; nothing to compare\n", sale)
	} else if archived > 0 {
		fmt.Fprintf(stdout, "%d of its segments are archived (the database's figures alone)\n", archived)
	}
	fmt.Fprintf(stdout, "sale %s is on %d segments; their sum:\n", sale, len(segs))
	sum := reconcile.Combine(sale, reps)
	reconcile.Print(stdout, sum)
	if drifted || sum.Drifted() {
		return 1
	}
	return 0
}
