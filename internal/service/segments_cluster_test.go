package service_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/service"
)

// TestSegmentsOnClusterMasters: on a real 3-master Redis Cluster, a hot
// item's segments are placed on different masters (every master serves
// one of 3 segments, two of 6), and the item sells out exactly there.
func TestSegmentsOnClusterMasters(t *testing.T) {
	cluster, err := redistest.StartCluster(3, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	a := startApp(t, service.Config{RedisClusterAddrs: cluster.Addrs(), DatabaseURL: dbtest.PostgresURL(t)})
	cc := cluster.Client()
	slots, err := cc.ClusterSlots(a.ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	masterOf := func(key string) string {
		slot, err := cc.ClusterKeySlot(a.ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range slots {
			if int64(r.Start) <= slot && slot <= int64(r.End) {
				return r.Nodes[0].Addr
			}
		}
		t.Fatalf("no master serves slot %d", slot)
		return ""
	}
	for _, k := range []int{3, 6} {
		sale := fmt.Sprintf("hot%d", k)
		mustStatus(t, a.createSegmented(sale, 1, "A", int64(30), k), http.StatusCreated)
		segs, err := a.svc.Store().Segments(a.ctx, sale)
		if err != nil || len(segs) != k {
			t.Fatalf("segments of %s: %v %v", sale, segs, err)
		}
		per := map[string]int{}
		for _, seg := range segs {
			per[masterOf(a.svc.Engine().Key(seg, "sale"))]++
		}
		if len(per) != 3 {
			t.Fatalf("%d segments of %s on %d masters: %v", k, sale, len(per), per)
		}
		for m, n := range per {
			if n != k/3 {
				t.Errorf("%s: master %s holds %d segments, want %d", sale, m, n, k/3)
			}
		}
		sold := 0
		for u := range 40 {
			r := a.buyOne(sale, fmt.Sprintf("u%d", u))
			switch r.status {
			case http.StatusCreated:
				sold++
			case http.StatusConflict:
			default:
				t.Fatalf("buy: %d %s", r.status, r.body)
			}
		}
		if sold != 30 {
			t.Fatalf("%s: %d sold, stock 30", sale, sold)
		}
		a.settle(sale)
		if got := saleItems(t, a, sale); got["A"] != [3]int64{0, 30, 30} {
			t.Fatalf("%s reads %v", sale, got)
		}
	}
}
