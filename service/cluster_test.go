package service_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/service"
)

// TestOnRedisCluster runs the service on a real 3-master Redis Cluster:
// sales land on different nodes, every script and the order pipeline run
// there, and the orders reach PostgreSQL.
func TestOnRedisCluster(t *testing.T) {
	cluster, err := redistest.StartCluster(3, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	a := startApp(t, service.Config{RedisClusterAddrs: cluster.Addrs(), DatabaseURL: dbtest.PostgresURL(t)})
	for i := range 6 {
		sale := fmt.Sprintf("s%d", i)
		a.createSale(sale, 1, "A", 5)
		for u := range 7 {
			r := a.buyOne(sale, fmt.Sprintf("u%d", u))
			if want := map[bool]int{true: http.StatusCreated, false: http.StatusConflict}[u < 5]; r.status != want {
				t.Errorf("%s buy %d: %d %s", sale, u, r.status, r.body)
			}
		}
		a.settle(sale)
	}
}
