package failover

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/store"
)

// beatStore is a database in degraded mode (epoch 2) that records the
// heartbeats and the hand-over; landed runs at the first heartbeat.
type beatStore struct {
	Store
	readAt  time.Time // when the sell mode was read
	beats   []store.Instance
	adopted bool
	landed  func()
}

func (s *beatStore) SellMode(context.Context) (store.SellMode, error) {
	s.readAt = time.Now()
	return store.SellMode{Mode: store.ModeDB, Epoch: 2}, nil
}

func (s *beatStore) Heartbeat(_ context.Context, in store.Instance) error {
	if len(s.beats) == 0 {
		s.landed()
	}
	s.beats = append(s.beats, in)
	return nil
}

func (s *beatStore) Instances(context.Context, time.Time) ([]store.Instance, error) { return nil, nil }
func (s *beatStore) AdoptOrders(context.Context, []inventory.Order) error {
	s.adopted = true
	return nil
}
func (s *beatStore) MarkUnsure(context.Context, []inventory.Order) error { return nil }
func (s *beatStore) AdoptMoves(context.Context, []inventory.MoveHalf, []inventory.MoveHalf) error {
	return nil
}
func (s *beatStore) TrustedRedis(context.Context) (map[string]store.RedisNode, error) {
	return nil, nil
}

// TestStepHeartbeatsBeforeTheHandOverWaits: a tick that must hand over
// while a buy of this instance is still on its way to Redis writes its
// heartbeat before it waits for that buy, stamped when it is written, so
// that the other instances see it alive (and wait for its hand-over)
// however long the ping and the wait took. The buy lands right after the
// first heartbeat: a tick that heartbeats only after its wait has given up
// by then and hands over nothing; one that heartbeats first hands over in
// the same tick and says so in a second heartbeat.
func TestStepHeartbeatsBeforeTheHandOverWaits(t *testing.T) {
	f := New(Config{Tick: 200 * time.Millisecond, AckRing: 4})
	db := &beatStore{}
	db.landed = func() { f.redisBuys.Add(-1) }
	f.Wire(Parts{Store: db, Ping: func(context.Context) error { return errors.New("redis away") }})
	f.redisBuys.Add(1) // a buy on its way to Redis

	f.Step(t.Context())

	if !db.adopted {
		t.Fatal("the tick did not hand over once the buy on its way landed: its heartbeat came after it gave up waiting")
	}
	if len(db.beats) == 0 {
		t.Fatal("no heartbeat")
	}
	if first := db.beats[0]; first.SeenAt.Before(db.readAt) {
		t.Errorf("the heartbeat is stamped %v, before the tick read the sell mode (%v): it says the tick's start, not when it was written", first.SeenAt, db.readAt)
	}
	if last := db.beats[len(db.beats)-1]; last.FlushedEpoch != 2 {
		t.Errorf("the last heartbeat says handed over for epoch %d, want 2", last.FlushedEpoch)
	}
}
