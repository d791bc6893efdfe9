package segment

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
)

// Plan returns the segments a sale is split into: k sales of the engine
// with the sale's definition, ids ids[i], and each limited item's stock
// split as evenly as it goes (the first segments get one unit more). Record
// them in the system of record as ordinary sales before Create, the way the
// engine's Loader expects.
func Plan(s inventory.Sale, ids []string) ([]inventory.Sale, error) {
	k := len(ids)
	if k < 1 || k > MaxSegments {
		return nil, &inventory.InvalidError{Field: "segments", Reason: fmt.Sprintf("must be between 1 and %d", MaxSegments)}
	}
	if err := inventory.ValidateSale(s); err != nil {
		return nil, err
	}
	out := make([]inventory.Sale, k)
	for i, id := range ids {
		if ParentOf(id) != s.ID || !inventory.ValidID(id) {
			return nil, &inventory.InvalidError{Field: "id", Reason: fmt.Sprintf("%q is not a segment id of %s (\"<sale>:<n>\", at most 64 characters)", id, s.ID)}
		}
		seg := s
		seg.ID = id
		seg.Items = make([]inventory.Item, len(s.Items))
		for j, it := range s.Items {
			if it.Stock != inventory.Unlimited {
				it.Stock = it.Stock / int64(k)
				if int64(i) < s.Items[j].Stock%int64(k) {
					it.Stock++
				}
			}
			seg.Items[j] = it
		}
		out[i] = seg
	}
	return out, nil
}

// Place picks the ids of k segments of a sale. On Redis Cluster it picks
// ids whose slots are served by different masters, round robin, so one hot
// item uses k cores (as many as there are masters); on one node they are
// "<sale>:0" .. "<sale>:<k-1>".
func (s *Seller) Place(ctx context.Context, saleID string, k int) ([]string, error) {
	if k < 1 || k > MaxSegments {
		return nil, &inventory.InvalidError{Field: "segments", Reason: fmt.Sprintf("must be between 1 and %d", MaxSegments)}
	}
	ids := make([]string, 0, k)
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		for n := range k {
			ids = append(ids, saleID+":"+strconv.Itoa(n))
		}
		return ids, nil
	}
	slots, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("segment: place %s: %w", saleID, err)
	}
	var masters []string
	for _, r := range slots {
		if len(r.Nodes) == 0 {
			continue
		}
		if !slices.Contains(masters, r.Nodes[0].Addr) {
			masters = append(masters, r.Nodes[0].Addr)
		}
	}
	slices.Sort(masters)
	masterOf := func(slot int64) string {
		for _, r := range slots {
			if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
				return r.Nodes[0].Addr
			}
		}
		return ""
	}
	n := 0
	for j := range k {
		want := masters[j%len(masters)]
		for tries := 0; ; tries++ {
			id := saleID + ":" + strconv.Itoa(n)
			n++
			slot, err := cc.ClusterKeySlot(ctx, s.eng.Key(id, "sale")).Result()
			if err != nil {
				return nil, fmt.Errorf("segment: place %s: %w", saleID, err)
			}
			if masterOf(slot) == want || tries == 1000 {
				ids = append(ids, id)
				break
			}
		}
	}
	return ids, nil
}

// RemoveDirectory removes a sale's directory from Redis (and this
// Seller's copy): call it once every segment of the sale is archived
// (removed from Redis for good), when nothing will be sold from it again.
// Options.Directory must then refuse the sale (an error), or a later look
// puts the directory back.
func (s *Seller) RemoveDirectory(ctx context.Context, saleID string) error {
	if err := s.rdb.Unlink(ctx, s.eng.Key(saleID, "segments")).Err(); err != nil {
		return fmt.Errorf("segment: remove the directory of %s: %w", saleID, err)
	}
	s.dirs.Delete(saleID)
	s.forget(saleID)
	return nil
}

// Create creates the segments of Plan(sale, ids) in Redis and the sale's
// directory: all of them, or none (CreateWith without a commit). A second
// Create of a sale fails with ErrExists and changes nothing.
func (s *Seller) Create(ctx context.Context, sale inventory.Sale, ids []string) error {
	return s.CreateWith(ctx, sale, ids, nil)
}

// CreateWith creates the segments of Plan(sale, ids) in Redis and the
// sale's directory, then runs commit, if not nil: the caller records the
// sale in its system of record (Options.Directory's source), after which
// it exists. All or nothing: if a segment's create fails (a node down, a
// key in the way) or commit does, what this call made in Redis is removed
// again, and the error is returned. A piece a Create that died part way
// left (its directory, some segments) is taken over only if it is exactly
// what this call would make, untouched (inventory.Engine.CreateSales);
// anything else of the sale's ids fails the call with ErrExists.
func (s *Seller) CreateWith(ctx context.Context, sale inventory.Sale, ids []string, commit func(context.Context) error) error {
	segs, err := Plan(sale, ids)
	if err != nil {
		return err
	}
	dir := strings.Join(ids, ",")
	key := s.eng.Key(sale.ID, "segments")
	set, err := s.rdb.SetNX(ctx, key, dir, 0).Result()
	if err != nil {
		return fmt.Errorf("segment: create %s: %w", sale.ID, err)
	}
	if !set {
		if cur, err := s.rdb.Get(ctx, key).Result(); err != nil || cur != dir {
			return fmt.Errorf("%w: sale %s", inventory.ErrExists, sale.ID)
		}
	}
	existed, err := s.eng.CreateSales(ctx, segs, commit)
	if err == nil && commit == nil && !set && existed == len(segs) {
		return fmt.Errorf("%w: sale %s", inventory.ErrExists, sale.ID) // made nothing
	}
	if err != nil {
		if set {
			if derr := s.rdb.Del(context.WithoutCancel(ctx), key).Err(); derr != nil {
				err = errors.Join(err, fmt.Errorf("segment: a failed create of %s left its directory: %w", sale.ID, derr))
			}
		}
		return err
	}
	s.dirs.Store(sale.ID, ids)
	return nil
}

// Cancel cancels an order of a segmented sale (its id names its segment)
// and returns its units to that segment.
func (s *Seller) Cancel(ctx context.Context, orderID, userID string) (inventory.Receipt, error) {
	rc, err := s.eng.Cancel(ctx, orderID, userID)
	if seg, perr := inventory.SaleOfOrder(orderID); perr == nil {
		s.forget(ParentOf(seg)) // even a failed call may have returned units
	}
	return rc, err
}

// Restock adds qty units of a limited item to the segment that has the
// fewest left (one atomic call), and returns what is left in all segments.
func (s *Seller) Restock(ctx context.Context, saleID, sku string, qty int64) (int64, error) {
	segs, err := s.Segments(ctx, saleID)
	if err != nil {
		return 0, err
	}
	rem, err := s.eng.Remaining(ctx, sku, segs...)
	if err != nil && !errors.Is(err, inventory.ErrNotFound) {
		return 0, err
	}
	to := 0
	for i := range segs {
		if rem[i] < rem[to] {
			to = i
		}
	}
	n, err := s.eng.Restock(ctx, segs[to], sku, qty)
	s.forget(saleID)
	if err != nil {
		return 0, err
	}
	total := n
	for i := range segs {
		if i != to {
			total += rem[i]
		}
	}
	return total, nil
}

// Pause pauses every segment; Resume resumes them. A call that fails part
// way can be made again.
func (s *Seller) Pause(ctx context.Context, saleID string) error {
	return s.each(ctx, saleID, s.eng.Pause)
}

// Resume resumes every segment of a paused sale.
func (s *Seller) Resume(ctx context.Context, saleID string) error {
	return s.each(ctx, saleID, s.eng.Resume)
}

func (s *Seller) each(ctx context.Context, saleID string, f func(context.Context, string) error) error {
	segs, err := s.Segments(ctx, saleID)
	if err != nil {
		return err
	}
	for _, id := range segs {
		if err := f(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// Stock returns the sale's definition, status and every item's counters
// summed over its segments, and each segment's own state, read in one
// pipeline. Units on their way between two segments (a move, or one that
// a failure left half done) are in neither segment's counters: the sum
// counts them as stocked (inventory.CountMoves), so that its Stocked is
// every unit the sale stocked, and Stocked - Remaining - Sold is the units
// moving.
func (s *Seller) Stock(ctx context.Context, saleID string) (inventory.SaleState, []inventory.SaleState, error) {
	segs, err := s.Segments(ctx, saleID)
	if err != nil {
		return inventory.SaleState{}, nil, err
	}
	per, errs := s.eng.Stocks(ctx, segs) // one round trip per node; a lost segment is rebuilt
	if err := errors.Join(errs...); err != nil {
		return inventory.SaleState{}, nil, err
	}
	sum := per[0]
	sum.Sale.ID = saleID
	sum.Sale.Items = slices.Clone(per[0].Sale.Items)
	sum.Items = slices.Clone(per[0].Items)
	sum.Moves = nil
	moves := make(map[string][]inventory.Move, len(segs))
	for i, id := range segs {
		moves[id] = per[i].Moves
	}
	for _, st := range per[1:] {
		for j := range sum.Items {
			if j >= len(st.Items) || st.Items[j].SKU != sum.Items[j].SKU {
				return inventory.SaleState{}, nil, fmt.Errorf("%w: segments of %s differ in items", inventory.ErrCorrupt, saleID)
			}
			sum.Items[j].Sold += st.Items[j].Sold
			sum.Items[j].Awaiting += st.Items[j].Awaiting
			if sum.Items[j].Stocked != inventory.Unlimited {
				sum.Items[j].Remaining += st.Items[j].Remaining
				sum.Items[j].Stocked += st.Items[j].Stocked
				sum.Sale.Items[j].Stock += st.Sale.Items[j].Stock
			}
		}
	}
	inMotion := inventory.CountMoves(moves)
	for j := range sum.Items {
		it := &sum.Items[j]
		if m, ok := inMotion[it.SKU]; ok && it.Stocked != inventory.Unlimited {
			it.Stocked += m.Moving - m.Twice
			it.Remaining -= m.Twice
			sum.Sale.Items[j].Stock = it.Stocked
		}
	}
	return sum, per, nil
}

// Rebalance first completes the moves between the sale's segments that a
// failure left half done (inventory.Engine.FinishMoves; a segment lost
// from Redis is rebuilt first, through the engine's Loader), then evens out
// what is left of every limited item over the segments, so that each
// segment's buyers find units at home. It returns the units it moved.
func (s *Seller) Rebalance(ctx context.Context, saleID string) (int64, error) {
	segs, err := s.Segments(ctx, saleID)
	if err != nil {
		return 0, err
	}
	// Units that arrive anywhere may be sold at once.
	defer s.forget(saleID)
	var def inventory.SaleState
	for i, id := range segs {
		// Reading the segment rebuilds it if it was lost from Redis, with
		// its records of moves: then its pending moves can be finished,
		// and its units counted.
		st, err := s.eng.Stock(ctx, id)
		if err != nil {
			return 0, err
		}
		if i == 0 {
			def = st // every segment has the same items
		}
		if err := s.finishMoves(ctx, id); err != nil {
			return 0, err
		}
	}
	var moved int64
	for _, it := range def.Items {
		if it.Stocked == inventory.Unlimited {
			continue
		}
		rem, err := s.eng.Remaining(ctx, it.SKU, segs...)
		if err != nil {
			return moved, err
		}
		var total int64
		for _, r := range rem {
			total += r
		}
		k := int64(len(segs))
		share := func(i int) int64 { // the first total%k segments get one more
			if int64(i) < total%k {
				return total/k + 1
			}
			return total / k
		}
		from := 0
		for to := range segs {
			for rem[to] < share(to) {
				for from < len(segs) && rem[from] <= share(from) {
					from++
				}
				if from == len(segs) {
					break
				}
				n, err := s.move(ctx, segs[from], segs[to], it.SKU, min(share(to)-rem[to], rem[from]-share(from)))
				if err != nil {
					return moved, err
				}
				if n == 0 { // sold meanwhile
					rem[from] = share(from)
					continue
				}
				moved += n
				rem[from] -= n
				rem[to] += n
			}
		}
	}
	return moved, nil
}
