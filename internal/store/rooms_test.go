package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/store"
)

// TestRooms: a room is written with its sale and goes with a create rolled
// back; the first draw saved is the one kept; the rate changes; the loop's
// list leaves out sales without a room and archiving ones.
func TestRooms(t *testing.T) {
	for _, d := range dbtest.Dialects(t) {
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			s, err := store.Open(ctx, d.URL)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			for _, id := range []string{"r1", "r2", "plain"} {
				if err := s.CreateSale(ctx, store.Sale{Sale: inventory.Sale{ID: id, Items: []inventory.Item{{SKU: "A", Stock: 5}}}}); err != nil {
					t.Fatal(err)
				}
			}
			for _, id := range []string{"r1", "r2"} {
				if err := s.CreateRoom(ctx, store.Room{SaleID: id, Secret: "sec-" + id, Commitment: "com-" + id, RatePerS: 7}); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.CreateRoom(ctx, store.Room{SaleID: "r1", Secret: "x", Commitment: "y"}); err == nil {
				t.Error("a second room of r1 was written")
			}
			if _, err := s.Room(ctx, "plain"); !errors.Is(err, store.ErrNoRoom) {
				t.Errorf("room of a sale without one: %v, want ErrNoRoom", err)
			}
			r, err := s.Room(ctx, "r1")
			if err != nil || r.Secret != "sec-r1" || r.Commitment != "com-r1" || r.RatePerS != 7 || r.Draw != nil || r.CreatedAt.IsZero() {
				t.Fatalf("room r1 = %+v, %v", r, err)
			}
			got, err := s.SaveDraw(ctx, "r1", []byte(`{"a":1}`), time.Now())
			if err != nil || string(got) != `{"a":1}` {
				t.Fatalf("first draw: %s, %v", got, err)
			}
			got, err = s.SaveDraw(ctx, "r1", []byte(`{"b":2}`), time.Now())
			if err != nil || string(got) != `{"a":1}` {
				t.Fatalf("second draw: %s, %v; want the first kept", got, err)
			}
			if err := s.SetRoomRate(ctx, "r1", 0); err != nil {
				t.Fatal(err)
			}
			if err := s.SetRoomRate(ctx, "plain", 3); !errors.Is(err, store.ErrNoRoom) {
				t.Errorf("rate of a sale without a room: %v", err)
			}
			if r, _ := s.Room(ctx, "r1"); r.RatePerS != 0 || r.DrawnAt.IsZero() {
				t.Errorf("room r1 after the rate and draw = %+v", r)
			}
			ids, err := s.RoomSales(ctx)
			slices.Sort(ids)
			if err != nil || !slices.Equal(ids, []string{"r1", "r2"}) {
				t.Fatalf("room sales = %v, %v", ids, err)
			}
			if err := s.BeginArchive(ctx, "r2", time.Now()); err != nil {
				t.Fatal(err)
			}
			if ids, _ := s.RoomSales(ctx); !slices.Equal(ids, []string{"r1"}) {
				t.Errorf("room sales with r2 archiving = %v", ids)
			}
			if _, err := s.Room(ctx, "r2"); err != nil {
				t.Errorf("the room of an archiving sale is kept: %v", err)
			}
			if err := s.DeleteSale(ctx, "r1"); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Room(ctx, "r1"); !errors.Is(err, store.ErrNoRoom) {
				t.Errorf("room of a deleted sale: %v", err)
			}
		})
	}
}
