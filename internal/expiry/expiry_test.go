package expiry_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/expiry"
)

// fakeEngine answers DueSales with due, and ExpireDue with batches of
// two orders while a sale has orders left in left.
type fakeEngine struct {
	due   []string
	lost  []string
	left  map[string]int
	asked [][]string
	calls int
	err   error
}

func (f *fakeEngine) DueSales(_ context.Context, ids []string) ([]string, []string, error) {
	f.asked = append(f.asked, slices.Clone(ids))
	return f.due, f.lost, f.err
}

func (f *fakeEngine) ExpireDue(_ context.Context, sale string, max int) ([]string, bool, error) {
	f.calls++
	n := min(f.left[sale], max)
	f.left[sale] -= n
	out := make([]string, n)
	for i := range out {
		out[i] = sale + ".order"
	}
	return out, f.left[sale] > 0, nil
}

// TestTick: a tick looks at the sales with no end or a recent one (all of
// them on a sweep, the first tick's included), and expires a due sale's
// orders batch after batch until none is left.
func TestTick(t *testing.T) {
	now := time.Now()
	sales := []expiry.Sale{
		{ID: "open", Timeout: time.Minute},
		{ID: "recent", EndsAt: now.Add(-10 * time.Minute), Timeout: time.Minute},
		{ID: "old", EndsAt: now.Add(-3 * time.Hour), Timeout: time.Minute},
	}
	eng := &fakeEngine{due: []string{"open"}, left: map[string]int{"open": 5}}
	var told int
	loop := expiry.New(eng, expiry.Options{
		Sales:     func(context.Context) ([]expiry.Sale, error) { return sales, nil },
		Batch:     2,
		OnExpired: func(_ string, orders []string) { told += len(orders) },
	})
	n, err := loop.Tick(context.Background())
	if err != nil || n != 5 || told != 5 || eng.calls != 3 {
		t.Fatalf("first tick: %d expired, %v, %d told, %d calls; want 5 in 3 calls", n, err, told, eng.calls)
	}
	if _, err := loop.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := [][]string{{"open", "recent", "old"}, {"open", "recent"}}; !slices.EqualFunc(eng.asked, want, slices.Equal) {
		t.Fatalf("sales asked about: %v, want %v", eng.asked, want)
	}
	eng.err = errors.New("redis away")
	if _, err := loop.Tick(context.Background()); err == nil {
		t.Fatal("a tick whose DueSales failed returned no error")
	}
}

// TestTickTellsLost: the sales DueSales finds missing from Redis are told
// to Lost (which brings back the ones with reservations), and not expired.
func TestTickTellsLost(t *testing.T) {
	eng := &fakeEngine{lost: []string{"gone"}, left: map[string]int{}}
	var told [][]string
	loop := expiry.New(eng, expiry.Options{
		Sales: func(context.Context) ([]expiry.Sale, error) {
			return []expiry.Sale{{ID: "gone", Timeout: time.Minute}, {ID: "here", Timeout: time.Minute}}, nil
		},
		Lost: func(_ context.Context, ids []string) error { told = append(told, ids); return nil },
	})
	if n, err := loop.Tick(context.Background()); err != nil || n != 0 || eng.calls != 0 {
		t.Fatalf("tick: %d expired, %v, %d ExpireDue calls", n, err, eng.calls)
	}
	if !slices.EqualFunc(told, [][]string{{"gone"}}, slices.Equal) {
		t.Fatalf("told lost %v, want [[gone]]", told)
	}
}

// TestTickPaused: while Paused says so, a tick expires nothing, also when
// it turns so between DueSales and the expiry (DueSales found Redis
// restarted).
func TestTickPaused(t *testing.T) {
	eng := &fakeEngine{due: []string{"s"}, left: map[string]int{"s": 3}}
	paused := true
	loop := expiry.New(eng, expiry.Options{
		Sales: func(context.Context) ([]expiry.Sale, error) {
			return []expiry.Sale{{ID: "s", Timeout: time.Minute}}, nil
		},
		Paused: func() bool { return paused },
	})
	if n, err := loop.Tick(context.Background()); err != nil || n != 0 || eng.calls != 0 || len(eng.asked) != 0 {
		t.Fatalf("paused tick: %d expired, %v, %d calls, asked %v", n, err, eng.calls, eng.asked)
	}
	asks := 0
	loop = expiry.New(eng, expiry.Options{
		Sales: func(context.Context) ([]expiry.Sale, error) {
			return []expiry.Sale{{ID: "s", Timeout: time.Minute}}, nil
		},
		Paused: func() bool {
			asks++
			return asks > 1 // pauses once DueSales has run
		},
	})
	if n, err := loop.Tick(context.Background()); err != nil || n != 0 || eng.calls != 0 {
		t.Fatalf("tick paused after DueSales: %d expired, %v, %d calls", n, err, eng.calls)
	}
	paused = false
	if n, err := expiry.New(eng, expiry.Options{
		Sales: func(context.Context) ([]expiry.Sale, error) {
			return []expiry.Sale{{ID: "s", Timeout: time.Minute}}, nil
		},
		Paused: func() bool { return paused },
	}).Tick(context.Background()); err != nil || n != 3 {
		t.Fatalf("tick not paused: %d expired, %v", n, err)
	}
}
