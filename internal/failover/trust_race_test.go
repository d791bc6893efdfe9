package failover

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/store"
)

// infoNode is a Redis master as its INFO describes it.
type infoNode struct {
	runID    string
	promoted bool // a second replication id: a replica promoted
}

func (n infoNode) Info(ctx context.Context, _ ...string) *redis.StringCmd {
	second := "-1"
	if n.promoted {
		second = "12345"
	}
	return redis.NewStringResult("role:master\r\nrun_id:"+n.runID+"\r\nmaster_replid:r1\r\nsecond_repl_offset:"+second+"\r\n", nil)
}

func (n infoNode) ClusterMyID(ctx context.Context) *redis.StringCmd {
	return redis.NewStringResult("", errors.New("not a cluster"))
}

// endedStore is a database whose recovery (epoch 5) has just ended (redis,
// epoch 6); read runs as the mode is read. It records the nodes trusted.
type endedStore struct {
	Store
	read    func()
	trusted []store.RedisNode
}

func (s *endedStore) TrustedRedis(context.Context) (map[string]store.RedisNode, error) {
	return map[string]store.RedisNode{"": {RunID: "run-1", ReplID: "r1"}}, nil
}

func (s *endedStore) SellMode(context.Context) (store.SellMode, error) {
	s.read()
	return store.SellMode{Mode: store.ModeRedis, Epoch: 6}, nil
}

func (s *endedStore) Heartbeat(context.Context, store.Instance) error { return nil }

func (s *endedStore) TrustRedis(_ context.Context, nodes []store.RedisNode, _ string, _ time.Time) error {
	s.trusted = append(s.trusted, nodes...)
	return nil
}

func (s *endedStore) SwitchMode(context.Context, int64, string, time.Time, time.Time, string) (store.SellMode, error) {
	return store.SellMode{}, store.ErrModeChanged
}

// TestRestartSeenAsARecoveryEndsIsNotVouchedFor: Redis restarts again
// (run-3) as a recovery (epoch 5) ends: an instance sees it just as it
// reads that the recovery is over (redis, epoch 6), its last read being
// the recovery's. That recovery may have repaired the node before the
// restart, so it vouches for nothing seen since: the instance holds Redis
// back (until a recovery that begins after run-3 was seen) and the fleet's
// trust does not get run-3. Whether the instance held Redis back already
// (after the restart to run-2 that the recovery repairs) or not (it saw
// run-2 only through the fleet's trust, or not at all).
func TestRestartSeenAsARecoveryEndsIsNotVouchedFor(t *testing.T) {
	for _, tc := range []struct {
		name string
		held bool   // since the restart to run-2, seen at epoch 4
		seen string // the run id this instance saw last
		now  string // ... and the one it sees as the recovery ends
		want bool   // held after the tick
	}{
		{"held", true, "run-2", "run-3", true},
		{"not held", false, "run-1", "run-3", true},
		// The node the recovery repaired, checked again on a new connection
		// as the recovery ends (a promoted master, its run id not the one
		// the fleet trusted): nothing changed, the recovery lifts the hold
		// (were it taken as changed, every recovery's end would begin
		// another).
		{"unchanged", true, "run-2", "run-2", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := New(Config{Tick: time.Second})
			db := &endedStore{}
			db.read = func() {
				if _, err := f.check(t.Context(), infoNode{runID: tc.now, promoted: true}); !errors.Is(err, ErrRedisRestarted) {
					t.Errorf("connection to the restarted redis: %v, want ErrRedisRestarted", err)
				}
			}
			f.Wire(Parts{Store: db, Ping: func(context.Context) error { return nil }})
			f.trusted = map[string]store.RedisNode{"": {RunID: "run-1", ReplID: "r1"}}
			f.stored, f.trustLoaded = f.trusted, true
			f.seen[""] = seenNode{RedisNode: store.RedisNode{RunID: tc.seen, ReplID: "r1"}, promoted: true}
			f.set(store.SellMode{Mode: store.ModeRecovering, Epoch: 5})
			if tc.held {
				f.restarted, f.firm, f.restartEpoch = true, true, 4
			}
			f.changed()

			f.Step(t.Context())

			if got := f.HeldBack(); got != tc.want {
				t.Errorf("held back after the recovery ended as %s was seen: %v, want %v", tc.now, got, tc.want)
			}
			trusted := false
			for _, n := range db.trusted {
				trusted = trusted || n.RunID == tc.now
			}
			if trusted == tc.want {
				t.Errorf("the fleet trusts %s: %v, want %v (%+v)", tc.now, trusted, !tc.want, db.trusted)
			}
		})
	}
}

// clusterNode is a Cluster master as its INFO and CLUSTER MYID describe it.
type clusterNode struct {
	infoNode
	id string
}

func (n clusterNode) ClusterMyID(context.Context) *redis.StringCmd {
	return redis.NewStringResult(n.id, nil)
}

// twoNodeStore is endedStore with two Cluster masters trusted by the fleet
// at run-1.
type twoNodeStore struct{ endedStore }

func (s *twoNodeStore) TrustedRedis(context.Context) (map[string]store.RedisNode, error) {
	return map[string]store.RedisNode{"n1": {Node: "n1", RunID: "run-1", ReplID: "r1"}, "n2": {Node: "n2", RunID: "run-1", ReplID: "r1"}}, nil
}

// TestNodeFirstSeenAsARecoveryEndsIsNotVouchedFor: as
// TestRestartSeenAsARecoveryEndsIsNotVouchedFor, for a Cluster master this
// instance checks for the first time (it held Redis back for another node,
// n1) just as it reads that the recovery is over: n2's run id is not the
// one the fleet trusts, so n2 restarted since, maybe after the recovery
// repaired it. Its first check is no less a change than a new run id on a
// node checked before: the recovery (epoch 5) does not vouch for it.
func TestNodeFirstSeenAsARecoveryEndsIsNotVouchedFor(t *testing.T) {
	f := New(Config{Tick: time.Second, Cluster: true})
	db := &twoNodeStore{}
	db.read = func() {
		if _, err := f.check(t.Context(), clusterNode{infoNode{runID: "run-3"}, "n2"}); !errors.Is(err, ErrRedisRestarted) {
			t.Errorf("connection to the restarted node: %v, want ErrRedisRestarted", err)
		}
	}
	f.Wire(Parts{Store: db, Ping: func(context.Context) error { return nil }})
	f.trusted, _ = db.TrustedRedis(t.Context())
	f.stored, f.trustLoaded = f.trusted, true
	f.seen["n1"] = seenNode{RedisNode: store.RedisNode{Node: "n1", RunID: "run-2", ReplID: "r1"}}
	f.set(store.SellMode{Mode: store.ModeRecovering, Epoch: 5})
	f.restarted, f.firm, f.restartEpoch = true, true, 4 // n1's restart, seen at epoch 4
	f.changed()

	f.Step(t.Context())

	if !f.HeldBack() {
		t.Error("not held back after the recovery ended as n2, checked for the first time, was seen restarted")
	}
	for _, n := range db.trusted {
		if n.RunID == "run-3" {
			t.Errorf("the fleet trusts n2's run-3, seen as the recovery ended: %+v", db.trusted)
		}
	}
}

// TestRestartSeenByAnInstancePassedOverIsNotVouchedFor: an instance that
// never learned of the recovery (epoch 5: it did not tick meanwhile, its
// heartbeat too old for the recovery to wait for its hand-over) sees Redis
// restarted (run-3), its last mode read being the one before that
// recovery (redis, epoch 4), and then reads that the recovery is over
// (redis, epoch 6). That recovery may have repaired the node before the
// restart: it vouches for nothing this instance saw, which recovers again.
func TestRestartSeenByAnInstancePassedOverIsNotVouchedFor(t *testing.T) {
	f := New(Config{Tick: time.Second})
	db := &endedStore{read: func() {}}
	f.Wire(Parts{Store: db, Ping: func(context.Context) error { return errors.New("redis away") }})
	f.trusted = map[string]store.RedisNode{"": {RunID: "run-1", ReplID: "r1"}}
	f.stored, f.trustLoaded = f.trusted, true
	f.seen[""] = seenNode{RedisNode: store.RedisNode{RunID: "run-1", ReplID: "r1"}}
	f.set(store.SellMode{Mode: store.ModeRedis, Epoch: 4})
	// Meanwhile recovery 5 ran, without this instance; then the node restarted.
	if _, err := f.check(t.Context(), infoNode{runID: "run-3"}); !errors.Is(err, ErrRedisRestarted) {
		t.Fatalf("connection to the restarted redis: %v, want ErrRedisRestarted", err)
	}

	f.Step(t.Context())

	if !f.HeldBack() {
		t.Error("not held back by a recovery this instance never learned of")
	}
	for _, n := range db.trusted {
		if n.RunID == "run-3" {
			t.Errorf("the fleet trusts run-3: %+v", db.trusted)
		}
	}
}
