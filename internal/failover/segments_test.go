package failover

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// homes puts every buyer of sale s1 in segment s1:2.
type homes struct{}

func (homes) Home(_ context.Context, sale, _ string) (string, error) {
	if sale == "s1" {
		return "s1:2", nil
	}
	return sale, nil
}

func (homes) Segments(_ context.Context, sale string) ([]string, error) {
	if sale == "s1" {
		return []string{"s1:0", "s1:1", "s1:2"}, nil
	}
	return nil, nil
}

// TestSegmentedBuyIsMadeInTheHomeSegment: a buy of a segmented sale is
// sent to the engine under the sale's id with an order id of the buyer's
// home segment; a buy of unknown outcome is handed over under that
// segment; the database sells it from that segment.
func TestSegmentedBuyIsMadeInTheHomeSegment(t *testing.T) {
	eng, db := &fakeEngine{}, &fakeStore{}
	f := New(Config{Tick: time.Second, AckRing: 4})
	f.Wire(Parts{Engine: eng, Store: db, Segments: homes{}})
	if _, err := f.Buy(context.Background(), buy("u1")); err != nil {
		t.Fatal(err)
	}
	if b := eng.buys[0]; b.SaleID() != "s1" || !strings.HasPrefix(b.OrderID(), "s1:2.") {
		t.Fatalf("sent %+v", b)
	}
	eng.err = io.ErrUnexpectedEOF
	_, _ = f.Buy(context.Background(), buy("u2"))
	if _, _, unsure, err := f.acks.snapshot(); err != nil || len(unsure) != 1 || unsure[0].SaleID != "s1:2" || !strings.HasPrefix(unsure[0].ID, "s1:2.") {
		t.Fatalf("unsure %+v", unsure)
	}
	dbMode(f)
	if _, err := f.Buy(context.Background(), buy("u3")); err != nil || len(db.buys) != 1 || db.buys[0].Buy.SaleID() != "s1:2" {
		t.Fatalf("database buy %+v, %v", db.buys, err)
	}
}
