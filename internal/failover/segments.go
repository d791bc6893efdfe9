package failover

import "context"

// Segments tells which engine sale sells a sale: the sale itself, or for a
// segmented sale (package segment) the buyer's home segment, where all of
// a buyer's orders of it are made and its per-user limit is counted.
// segment.Router is one; without it (Parts.Segments nil) every sale is an
// ordinary one.
type Segments interface {
	// Home returns the engine sale a user's orders of saleID are made in.
	Home(ctx context.Context, saleID, userID string) (string, error)
	// Segments returns a segmented sale's segment ids, nil for any other id.
	Segments(ctx context.Context, saleID string) ([]string, error)
}

// home is Segments.Home, or the sale itself without Segments.
func (f *Seller) home(ctx context.Context, saleID, userID string) (string, error) {
	if f.segs == nil {
		return saleID, nil
	}
	return f.segs.Home(ctx, saleID, userID)
}

// engineSales returns the engine sales of a sale: its segments, or itself.
func (f *Seller) engineSales(ctx context.Context, saleID string) ([]string, error) {
	if f.segs != nil {
		segs, err := f.segs.Segments(ctx, saleID)
		if err != nil || segs != nil {
			return segs, err
		}
	}
	return []string{saleID}, nil
}
