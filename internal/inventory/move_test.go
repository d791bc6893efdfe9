package inventory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
)

// moves returns the moved events of a sale's stream.
func (r *rig) moves(sale string) []inventory.Event {
	var out []inventory.Event
	for _, ev := range r.events(sale) {
		if ev.Type == inventory.EventMoved {
			out = append(out, ev)
		}
	}
	return out
}

// stocked returns every item's stocked total by sku.
func (r *rig) stocked(sale string) map[string]int64 {
	r.t.Helper()
	return r.counter(sale, func(it inventory.ItemState) int64 { return it.Stocked })
}

func twoSales(r *rig, a, b int64) {
	r.create(inventory.Sale{ID: "a", PerUserLimit: 5, Items: []inventory.Item{{SKU: "X", Stock: a}, {SKU: "U", Stock: -1}}})
	r.create(inventory.Sale{ID: "b", PerUserLimit: 5, Items: []inventory.Item{{SKU: "X", Stock: b}, {SKU: "U", Stock: -1}}})
}

// TestMove: units leave one sale and arrive in the other, never more than
// are left, each half journaled in its own sale's stream under one move id.
func TestMove(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		r := newRig(t, be, inventory.Options{})
		twoSales(r, 10, 0)
		if _, err := r.eng.Buy(r.ctx, "a", "u1", []inventory.Line{{SKU: "X", Qty: 2}}, ""); err != nil {
			t.Fatal(err)
		}
		n, err := r.eng.Move(r.ctx, "a", "b", "X", 3)
		if err != nil || n != 3 {
			t.Fatalf("Move 3 of 8: %d, %v", n, err)
		}
		n, err = r.eng.Move(r.ctx, "a", "b", "X", 100)
		if err != nil || n != 5 {
			t.Fatalf("Move 100 of 5 left: %d, %v", n, err)
		}
		n, err = r.eng.Move(r.ctx, "a", "b", "X", 1)
		if err != nil || n != 0 {
			t.Fatalf("Move from an empty item: %d, %v", n, err)
		}
		if a, b := r.remaining("a")["X"], r.remaining("b")["X"]; a != 0 || b != 8 {
			t.Errorf("remaining a=%d b=%d, want 0 and 8", a, b)
		}
		// Stocked follows the units, so remaining + sold == stocked holds.
		if a, b := r.stocked("a")["X"], r.stocked("b")["X"]; a != 2 || b != 8 {
			t.Errorf("stocked a=%d b=%d, want 2 and 8", a, b)
		}
		out, in := r.moves("a"), r.moves("b")
		if len(out) != 2 || len(in) != 2 {
			t.Fatalf("%d moved events in a, %d in b; want 2 each (an empty move journals nothing)", len(out), len(in))
		}
		for i := range out {
			if out[i].MoveID == "" || out[i].MoveID != in[i].MoveID || out[i].Qty != -in[i].Qty || out[i].Qty >= 0 ||
				out[i].Peer != "b" || in[i].Peer != "a" || out[i].SKU != "X" {
				t.Errorf("move %d: out %+v, in %+v", i, out[i], in[i])
			}
		}
		if out[1].Remaining != 0 || in[1].Remaining != 8 {
			t.Errorf("remaining in the events: out %d, in %d", out[1].Remaining, in[1].Remaining)
		}
	})
}

// TestMoveRefusals: bad moves are errors and change nothing.
func TestMoveRefusals(t *testing.T) {
	r := newRig(t, backends[0], inventory.Options{})
	twoSales(r, 10, 0)
	cases := []struct {
		name     string
		from, to string
		sku      string
		qty      int64
		want     error
	}{
		{"same sale", "a", "a", "X", 1, inventory.ErrInvalid},
		{"no units", "a", "b", "X", 0, inventory.ErrInvalid},
		{"bad sale id", "a", "b c", "X", 1, inventory.ErrInvalid},
		{"unlimited", "a", "b", "U", 1, inventory.ErrInvalid},
		{"unknown sku", "a", "b", "Z", 1, inventory.ErrNotFound},
	}
	for _, c := range cases {
		if _, err := r.eng.Move(r.ctx, c.from, c.to, c.sku, c.qty); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := r.eng.Fence(r.ctx, "a", 7); err != nil {
		t.Fatal(err)
	}
	if _, err := r.eng.Move(r.ctx, "a", "b", "X", 1); !errors.Is(err, inventory.ErrFenced) {
		t.Errorf("move out of a fenced sale: %v", err)
	}
	if a, b := r.remaining("a")["X"], r.remaining("b")["X"]; a != 10 || b != 0 {
		t.Errorf("remaining a=%d b=%d after refusals, want 10 and 0", a, b)
	}
	if len(r.moves("a"))+len(r.moves("b")) != 0 {
		t.Error("a refused move was journaled")
	}
}

// TestMoveCutInHalfIsFinished: the second half of a move cannot be applied
// (its sale is fenced, then its calls never reach Redis). The units are in
// neither sale, Move says the move is pending, and FinishMoves completes it
// exactly once.
func TestMoveCutInHalfIsFinished(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		r := newRig(t, be, inventory.Options{})
		twoSales(r, 10, 0)
		if _, err := r.eng.Fence(r.ctx, "b", 3); err != nil {
			t.Fatal(err)
		}
		n, err := r.eng.Move(r.ctx, "a", "b", "X", 4)
		var pending *inventory.MoveError
		if !errors.As(err, &pending) || !errors.Is(err, inventory.ErrFenced) || n != 0 || pending.Units != 4 {
			t.Fatalf("move into a fenced sale: %d, %v", n, err)
		}
		if a, b := r.remaining("a")["X"], r.remaining("b")["X"]; a != 6 || b != 0 {
			t.Errorf("remaining a=%d b=%d while the move is pending, want 6 and 0", a, b)
		}
		if done, err := r.eng.FinishMoves(r.ctx, "a"); !errors.Is(err, inventory.ErrFenced) || done != 0 {
			t.Errorf("FinishMoves while still fenced: %d, %v", done, err)
		}
		if err := r.eng.Unfence(r.ctx, "b", 3); err != nil {
			t.Fatal(err)
		}
		for round, want := range []int{1, 0} {
			if done, err := r.eng.FinishMoves(r.ctx, "a"); err != nil || done != want {
				t.Errorf("FinishMoves round %d: %d, %v; want %d", round, done, err, want)
			}
		}
		if a, b := r.remaining("a")["X"], r.remaining("b")["X"]; a != 6 || b != 4 {
			t.Errorf("remaining a=%d b=%d after FinishMoves, want 6 and 4", a, b)
		}
		if in := r.moves("b"); len(in) != 1 || in[0].MoveID != pending.ID || in[0].Qty != 4 {
			t.Errorf("moved events of b: %+v", in)
		}
	})
}

// TestMoveLostRepliesMoveOnce: the replies of both halves are lost after
// they ran; the engine sends them again, and they find they were applied.
// Then the in half's calls never reach Redis at all: FinishMoves completes
// the move, once, however often it runs.
func TestMoveLostRepliesMoveOnce(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	r := newRig(t, backend{client: func(testing.TB) redis.UniversalClient { return rdb }}, inventory.Options{})
	twoSales(r, 10, 0)
	out := &flaky{match: scriptWithKey(r.key("a", "sale")), after: true}
	in := &flaky{match: scriptWithKey(r.key("b", "sale")), after: true}
	rdb.AddHook(out)
	rdb.AddHook(in)
	out.failing.Store(1)
	in.failing.Store(1)
	if n, err := r.eng.Move(r.ctx, "a", "b", "X", 3); err != nil || n != 3 {
		t.Fatalf("Move with lost replies: %d, %v", n, err)
	}
	if a, b := r.remaining("a")["X"], r.remaining("b")["X"]; a != 7 || b != 3 {
		t.Errorf("remaining a=%d b=%d, want 7 and 3", a, b)
	}

	in.after = false
	in.failing.Store(3) // every attempt of the in half
	if _, err := r.eng.Move(r.ctx, "a", "b", "X", 2); err == nil {
		t.Fatal("Move whose in half never arrived succeeded")
	}
	if a, b := r.remaining("a")["X"], r.remaining("b")["X"]; a != 5 || b != 3 {
		t.Errorf("remaining a=%d b=%d, want 5 and 3 while pending", a, b)
	}
	for range 2 {
		if _, err := r.eng.FinishMoves(r.ctx, "a"); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := r.remaining("a")["X"], r.remaining("b")["X"]; a != 5 || b != 5 {
		t.Errorf("remaining a=%d b=%d after FinishMoves, want 5 and 5", a, b)
	}
	if len(r.moves("a")) != 2 || len(r.moves("b")) != 2 {
		t.Errorf("%d out and %d in events, want 2 each", len(r.moves("a")), len(r.moves("b")))
	}
}

// TestRemaining reads one item of several sales, and names the missing.
func TestRemaining(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		r := newRig(t, be, inventory.Options{})
		twoSales(r, 10, 3)
		got, err := r.eng.Remaining(r.ctx, "X", "a", "b")
		if err != nil || len(got) != 2 || got[0] != 10 || got[1] != 3 {
			t.Fatalf("Remaining(X, a, b) = %v, %v", got, err)
		}
		if got, err := r.eng.Remaining(r.ctx, "U", "a"); err != nil || got[0] != -1 {
			t.Errorf("Remaining of an unlimited item = %v, %v", got, err)
		}
		var nf *inventory.NotFoundError
		if _, err := r.eng.Remaining(r.ctx, "X", "a", "nope"); !errors.As(err, &nf) || len(nf.IDs) != 1 || nf.IDs[0] != "nope" {
			t.Errorf("Remaining with a missing sale: %v", err)
		}
	})
}

// cancelAfter cancels a context once a script call whose first key is key
// has run: a caller that gives up (a buyer's request cancelled, its
// connection closed) right after that call.
type cancelAfter struct {
	key    string
	cancel context.CancelFunc
}

func (c cancelAfter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c cancelAfter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if scriptWithKey(c.key)(cmd) {
			c.cancel()
		}
		return err
	}
}

func (c cancelAfter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestMoveOutlivesItsCaller: the caller's context is cancelled right after
// the out half ran. The in half does not depend on it: the units arrive,
// and Move says so.
func TestMoveOutlivesItsCaller(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	r := newRig(t, backend{client: func(testing.TB) redis.UniversalClient { return rdb }}, inventory.Options{})
	twoSales(r, 10, 0)
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	rdb.AddHook(cancelAfter{key: r.key("a", "sale"), cancel: cancel})
	n, err := r.eng.Move(ctx, "a", "b", "X", 4)
	if err != nil || n != 4 {
		t.Errorf("Move whose caller gave up after the out half: %d, %v", n, err)
	}
	if a, b := r.remaining("a")["X"], r.remaining("b")["X"]; a != 6 || b != 4 {
		t.Errorf("remaining a=%d b=%d, want 6 and 4: the units are in neither sale", a, b)
	}
}

// pendingNotes returns the index of pending moves: member -> score.
func (r *rig) pendingNotes() map[string]float64 {
	r.t.Helper()
	zs, err := r.rdb.ZRangeWithScores(r.ctx, "{"+r.prefix+":}:moves", 0, -1).Result()
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[string]float64{}
	for _, z := range zs {
		out[z.Member.(string)] = z.Score
	}
	return out
}

// TestFinishPendingMoves: moves whose in half never ran are noted, and any
// engine on the same Redis finishes them (a dead process's, a fenced
// destination's once unfenced), once; a note whose move never left its
// source is dropped after a while; done moves, and moves that took
// nothing, leave no note.
func TestFinishPendingMoves(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	r := newRig(t, backend{client: func(testing.TB) redis.UniversalClient { return rdb }}, inventory.Options{})
	twoSales(r, 10, 0)
	elsewhere := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	t.Cleanup(func() { _ = elsewhere.Close() })
	other := inventory.New(elsewhere, inventory.Options{Prefix: r.prefix, Clock: r.clock}) // another process

	if n, err := r.eng.Move(r.ctx, "a", "b", "X", 1); err != nil || n != 1 {
		t.Fatalf("Move: %d, %v", n, err)
	}
	if n, err := r.eng.Move(r.ctx, "b", "a", "U", 1); err == nil || n != 0 {
		t.Fatalf("Move of an unlimited item: %d, %v", n, err)
	}
	if notes := r.pendingNotes(); len(notes) != 0 {
		t.Fatalf("moves done or refused left notes: %v", notes)
	}

	// The in half never reaches Redis: as if the process died after the
	// out half.
	in := &flaky{match: scriptWithKey(r.key("b", "sale"))}
	rdb.AddHook(in)
	in.failing.Store(3)
	var pending *inventory.MoveError
	if _, err := r.eng.Move(r.ctx, "a", "b", "X", 3); !errors.As(err, &pending) {
		t.Fatalf("Move whose in half never ran: %v", err)
	}
	if notes := r.pendingNotes(); len(notes) != 1 {
		t.Fatalf("notes of a pending move: %v", notes)
	}
	if done, err := other.FinishPendingMoves(r.ctx, time.Hour); err != nil || done != 0 {
		t.Errorf("FinishPendingMoves of moves an hour old: %d, %v", done, err)
	}
	for round, want := range []int{1, 0} {
		if done, err := other.FinishPendingMoves(r.ctx, 0); err != nil || done != want {
			t.Errorf("FinishPendingMoves round %d: %d, %v; want %d", round, done, err, want)
		}
	}
	if a, b := r.remaining("a")["X"], r.remaining("b")["X"]; a != 6 || b != 4 {
		t.Errorf("remaining a=%d b=%d, want 6 and 4", a, b)
	}
	if notes := r.pendingNotes(); len(notes) != 0 {
		t.Errorf("a finished move left its note: %v", notes)
	}

	// The destination is fenced: the move waits, noted, until it is not.
	if _, err := r.eng.Fence(r.ctx, "b", 3); err != nil {
		t.Fatal(err)
	}
	if _, err := r.eng.Move(r.ctx, "a", "b", "X", 2); !errors.Is(err, inventory.ErrFenced) {
		t.Fatalf("Move into a fenced sale: %v", err)
	}
	if done, err := other.FinishPendingMoves(r.ctx, 0); !errors.Is(err, inventory.ErrFenced) || done != 0 {
		t.Errorf("FinishPendingMoves while fenced: %d, %v", done, err)
	}
	if err := r.eng.Unfence(r.ctx, "b", 3); err != nil {
		t.Fatal(err)
	}
	if done, err := other.FinishPendingMoves(r.ctx, 0); err != nil || done != 1 {
		t.Errorf("FinishPendingMoves once unfenced: %d, %v", done, err)
	}
	if a, b := r.remaining("a")["X"], r.remaining("b")["X"]; a != 4 || b != 6 {
		t.Errorf("remaining a=%d b=%d, want 4 and 6", a, b)
	}

	// The out half's call never reaches Redis: its note stays while the
	// call might still come, then goes; nothing moves.
	out := &flaky{match: scriptWithKey(r.key("a", "sale"))}
	rdb.AddHook(out)
	out.failing.Store(3)
	if _, err := r.eng.Move(r.ctx, "a", "b", "X", 1); err == nil || errors.As(err, &pending) {
		t.Fatalf("Move whose out half never ran: %v", err)
	}
	if done, err := other.FinishPendingMoves(r.ctx, 0); err != nil || done != 0 || len(r.pendingNotes()) != 1 {
		t.Errorf("a move that never left: %d, %v, notes %v", done, err, r.pendingNotes())
	}
	r.clock.Set(r.clock.Now().Add(2 * time.Minute))
	if done, err := other.FinishPendingMoves(r.ctx, 0); err != nil || done != 0 || len(r.pendingNotes()) != 0 {
		t.Errorf("a move that never left, later: %d, %v, notes %v", done, err, r.pendingNotes())
	}
	if a, b := r.remaining("a")["X"], r.remaining("b")["X"]; a != 4 || b != 6 {
		t.Errorf("remaining a=%d b=%d, want 4 and 6", a, b)
	}
}

// TestCountMoves: whichever way the reads of two sales and a move between
// them interleave, the sum of their counters corrected by CountMoves counts
// the move's units once: out of the source and not yet in the destination,
// they are Moving; read in both, they are Twice.
func TestCountMoves(t *testing.T) {
	out := inventory.Move{ID: "mv-1", Peer: "b", SKU: "X", Units: -3}
	done := out
	done.Arrived = true
	in := inventory.Move{ID: "mv-1", Peer: "a", SKU: "X", Units: 3}
	other := inventory.Move{ID: "mv-2", Peer: "elsewhere", SKU: "X", Units: -5}
	for _, c := range []struct {
		name string
		a, b []inventory.Move
		want inventory.InMotion
	}{
		{"neither read after it", nil, nil, inventory.InMotion{}},
		{"the source read after the out half, the destination before the in half", []inventory.Move{out}, nil, inventory.InMotion{Moving: 3}},
		{"the source read after the move was done, the destination before it arrived", []inventory.Move{done}, nil, inventory.InMotion{Moving: 3}},
		{"the source read before the move, the destination after it", nil, []inventory.Move{in}, inventory.InMotion{Twice: 3}},
		{"both read after it", []inventory.Move{out}, []inventory.Move{in}, inventory.InMotion{}},
		{"a move to a sale not given", []inventory.Move{other}, nil, inventory.InMotion{}},
	} {
		got := inventory.CountMoves(map[string][]inventory.Move{"a": c.a, "b": c.b})["X"]
		if got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
