package clusterclient_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/clusterclient"
	"github.com/seckill/seckill/internal/redistest"
)

// afterPromotion is how long after the cluster reports the promotion the
// clients' commands are watched: twice ReloadInterval, so that a client that
// only found the new master at its periodic reload would fail in it.
const afterPromotion = 2 * clusterclient.ReloadInterval

// getter issues a GET of key every few milliseconds, one at a time, as a
// service's traffic does, and records when each began and how it ended.
type getter struct {
	mu   sync.Mutex
	gets []get
	stop chan struct{}
	done chan struct{}
}

type get struct {
	began time.Time
	val   string
	err   error
}

func startGetter(c *redis.ClusterClient, key string) *getter {
	g := &getter{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(g.done)
		for {
			select {
			case <-g.stop:
				return
			case <-time.After(5 * time.Millisecond): // pacing, not synchronisation
			}
			began := time.Now()
			val, err := c.Get(context.Background(), key).Result()
			g.mu.Lock()
			g.gets = append(g.gets, get{began, val, err})
			g.mu.Unlock()
		}
	}()
	return g
}

// since returns the GETs that began at t or later, and whether one began at
// end or later has finished.
func (g *getter) since(t, end time.Time) ([]get, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []get
	for _, x := range g.gets {
		if !x.began.Before(t) {
			out = append(out, x)
		}
	}
	return out, len(out) > 0 && !out[len(out)-1].began.Before(end)
}

// TestFindsPromotedReplica: a master dies while clients keep reading one of
// its keys; once the cluster reports the replica promoted, every GET the
// clients issue returns the value. Two clients: one with New's defaults
// (catches a retry budget shorter than a slot map reload plus its interval,
// e.g. go-redis's defaults with a reload every 2 s), and one whose periodic
// reload is an hour away (catches a client that does not reload its slot map
// when a node cannot be dialled).
func TestFindsPromotedReplica(t *testing.T) {
	cluster, err := redistest.StartCluster(3, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	clients := map[string]*redis.ClusterClient{
		"defaults":       clusterclient.New(&redis.ClusterOptions{Addrs: cluster.Addrs()}),
		"reload-in-an-h": clusterclient.New(&redis.ClusterOptions{Addrs: cluster.Addrs(), ClusterStateReloadInterval: time.Hour}),
	}
	for _, c := range clients {
		t.Cleanup(func() { _ = c.Close() })
	}
	ctx := t.Context()
	setup := clients["defaults"]
	key := "{" + redistest.Prefix(t, setup) + ":sale}:stock"
	if err := setup.Set(ctx, key, "100", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var victim string
	err = setup.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		if n.Exists(ctx, key).Val() == 1 {
			victim = n.Options().Addr
			return n.Wait(ctx, 1, 10*time.Second).Err() // the replica has the key
		}
		return nil
	})
	if err != nil || victim == "" {
		t.Fatalf("finding the key's master: %q, %v", victim, err)
	}
	getters := map[string]*getter{}
	for name, c := range clients {
		if v, err := c.Get(ctx, key).Result(); err != nil || v != "100" {
			t.Fatalf("%s: GET before the failover = %q, %v", name, v, err)
		}
		getters[name] = startGetter(c, key)
		defer func() {
			close(getters[name].stop)
			<-getters[name].done
		}()
	}

	if err := cluster.Kill(victim); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitFailover(ctx, victim); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	end := promoted.Add(afterPromotion)
	for name, g := range getters {
		// Wait for a GET begun after the watched window to finish (each GET
		// gives up within its retries, a few seconds).
		var gets []get
		for deadline := time.Now().Add(afterPromotion + 30*time.Second); ; {
			var over bool
			if gets, over = g.since(promoted, end); over {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the GETs after the promotion did not go on (%d made)", name, len(gets))
			}
			select {
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
		failed := 0
		for _, x := range gets {
			if x.err != nil || x.val != "100" {
				if failed++; failed <= 3 {
					t.Errorf("%s: GET begun %v after the promotion = %q, %v; want 100",
						name, x.began.Sub(promoted).Round(time.Millisecond), x.val, x.err)
				}
			}
		}
		t.Logf("%s: %d GETs in the %v after the promotion, %d failed", name, len(gets), afterPromotion, failed)
	}
}
