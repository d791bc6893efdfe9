package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/clusterclient"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/reconcile"
	"github.com/seckill/seckill/internal/service"
	"github.com/seckill/seckill/internal/store"
)

// runReconcile runs one reconciliation pass of one sale and prints it as a
// table; with --repair, drift is then repaired from the database (and
// journaled), unless events are in flight to it, and the pass after the
// repair is printed too. Exit status: 0 consistent (or repaired to
// consistent), 1 drift left (found without --repair, or not repaired: the
// reason is printed) or a failure, 2 usage.
func runReconcile(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("seckill reconcile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	where := storeFlags(fs, getenv, true)
	fs.Lookup("redis").Usage = "the service's Redis URL redis://[user:pass@]host:port/db (env SECKILL_REDIS_URL); required, or --redis-cluster"
	fs.Lookup("db").Usage = "the service's database URL postgres://... or sqlite://PATH (env SECKILL_DATABASE_URL); required"
	prefix := keyPrefixFlag(fs, getenv)
	sale := fs.String("sale", "", "the sale to reconcile (required)")
	repair := fs.Bool("repair", false,
		"repair drift: set the sale's state in Redis to the database's, journaled in its repairs table; never while orders are in flight to the database")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var cfg service.Config
	where.set(&cfg)
	switch {
	case !inventory.ValidID(*sale):
		fmt.Fprintln(stderr, "seckill reconcile: --sale is required and must be a sale id")
		return 2
	case cfg.RedisURL == "" && len(cfg.RedisClusterAddrs) == 0:
		fmt.Fprintln(stderr, "seckill reconcile: needs the service's Redis (--redis or SECKILL_REDIS_URL, or --redis-cluster); an embedded one lives only inside its serve process")
		return 2
	case cfg.DatabaseURL == "":
		fmt.Fprintln(stderr, "seckill reconcile: needs the service's database (--db or SECKILL_DATABASE_URL; sqlite://seckill.db for serve's default file)")
		return 2
	}
	var rdb redis.UniversalClient
	if len(cfg.RedisClusterAddrs) > 0 {
		rdb = clusterclient.New(&redis.ClusterOptions{Addrs: cfg.RedisClusterAddrs})
	} else {
		opts, err := redis.ParseURL(cfg.RedisURL)
		if err != nil {
			fmt.Fprintln(stderr, "seckill reconcile: bad redis url:", err)
			return 2
		}
		rdb = redis.NewClient(opts)
	}
	defer rdb.Close()
	db, err := store.OpenSchema(ctx, cfg.DatabaseURL, cfg.DatabaseSchema)
	if err != nil {
		fmt.Fprintln(stderr, "seckill reconcile:", err)
		return 1
	}
	defer db.Close()
	// The sale's keys are those of the prefix the database belongs to; a
	// pass claims no database (a service does, when it starts).
	if err := db.CheckKeyPrefix(ctx, *prefix); err != nil {
		fmt.Fprintln(stderr, "seckill reconcile:", err)
		return 1
	}
	eng := inventory.New(rdb, inventory.Options{Prefix: *prefix})
	if st, err := db.Archive(ctx, *sale); err == nil && !st.ArchivedAt.IsZero() {
		fmt.Fprintf(stdout, "sale %s is archived (%s): its keys are gone from Redis and the database alone holds it; nothing to compare\n",
			*sale, st.ArchivedAt.Format(time.RFC3339))
		return 0
	}
	if segs, err := db.Segments(ctx, *sale); err != nil || len(segs) > 0 { // reconcile_segments.go
		if err != nil {
			fmt.Fprintln(stderr, "seckill reconcile:", err)
			return 1
		}
		return reconcileSegmented(ctx, eng, rdb, db, *sale, segs, *repair, stdout, stderr)
	}
	if *repair {
		res, err := reconcile.Repair(ctx, eng, rdb, db, *sale)
		if err != nil {
			if len(res.Changes) > 0 { // made, then journaling or the pass after it failed
				reconcile.Print(stdout, res.Before)
				fmt.Fprintln(stdout, "repaired from the database:", reconcile.Describe(res.Changes))
			}
			fmt.Fprintln(stderr, "seckill reconcile:", err)
			return 1
		}
		reconcile.PrintRepair(stdout, res)
		if res.After.Drifted() {
			return 1
		}
		return 0
	}
	rep, err := reconcile.Sale(ctx, eng, rdb, db, *sale)
	if err != nil {
		fmt.Fprintln(stderr, "seckill reconcile:", err)
		return 1
	}
	reconcile.Print(stdout, rep)
	if rep.Drifted() {
		return 1
	}
	return 0
}
