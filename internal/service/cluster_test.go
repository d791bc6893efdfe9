package service_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/service"
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

// TestStartsFromReplicaSeeds: the service connects to masters only
// (failover.ErrReplicaConnection), yet a seed list that names replicas
// alone — one node named, which a failover has made a replica since — is
// enough to start and sell: the masters are found from the seeds first.
func TestStartsFromReplicaSeeds(t *testing.T) {
	cluster, err := redistest.StartCluster(3, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	var replicas []string
	for _, addr := range cluster.Addrs() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		repl, err := c.Info(context.Background(), "replication").Result()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if infoField(repl, "role") == "slave" {
			replicas = append(replicas, addr)
		}
	}
	if len(replicas) != 3 {
		t.Fatalf("replicas %v, want 3", replicas)
	}
	a := startApp(t, service.Config{RedisClusterAddrs: replicas, DatabaseURL: dbtest.PostgresURL(t)})
	a.createSale("s1", 1, "A", 5)
	if r := a.buyOne("s1", "u1"); r.status != http.StatusCreated {
		t.Errorf("buy: %d %s", r.status, r.body)
	}
}
