// Package segment sells a hot item from several segments: the sale's stock
// is split over K sales of the engine (the segments), each under its own
// hash tag, so on Redis Cluster the segments of one item can live on
// different nodes and one hot item can use more than one Redis core.
//
// Every buyer has a home segment, chosen by a hash of the user id, and
// every buy of that buyer runs there, as one ordinary inventory buy: the
// per-user limit, idempotency keys, the order record and the order event
// are exactly the engine's, because everything a buyer holds is in one
// segment. A multi-item buy is all-or-nothing in its home segment, like any
// buy. When the home segment has too few units left, the buy falls through:
// the seller moves units from the segments that have the most left to the
// home segment (inventory.Engine.Move: the units are in one segment or the
// other, never both) and buys again. An item is sold out only when every
// segment is empty. Rebalance evens out what is left over.
//
// Each segment is an ordinary sale of the engine ("<sale>:<n>"): its own
// stream, rebuilt from the system of record alone, reconciled alone. The
// list of a sale's segments (its directory) is kept in Redis next to the
// first segment and cached by every Seller for the sale's life.
package segment

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/ttlcache"
)

// MaxSegments bounds the segments of one sale.
const MaxSegments = 64

// Options tune a Seller. The zero value of every field is usable.
type Options struct {
	// Directory returns the segment ids of a sale whose directory is
	// missing from Redis (lost with the node that held it), from the
	// caller's system of record, in the order Create was given them (the
	// order decides every buyer's home segment). Without it, such a sale
	// is ErrNotFound.
	Directory func(ctx context.Context, saleID string) ([]string, error)
	// SoldOutTTL is how long a Seller refuses an item it found empty in
	// every segment without asking Redis again. Stock that comes back
	// through another Seller is sold again within it. Default 500ms;
	// negative: always ask.
	SoldOutTTL time.Duration
	// Clock is the time source of the sold-out flags. Default: the system clock.
	Clock inventory.Clock
}

// maxSoldOutFlags bounds a Seller's sold-out flags (one per item found
// empty in every segment); past it, expired flags are dropped first, then
// arbitrary ones, which only costs a look at Redis.
const maxSoldOutFlags = 1 << 16

// Seller sells segmented sales through an engine. It is safe for
// concurrent use; make one per engine.
type Seller struct {
	eng *inventory.Engine
	rdb redis.UniversalClient
	o   Options

	dirs              sync.Map                  // sale id -> []string, the segment ids
	fills             sync.Map                  // "<segment>\x00<sku>" -> *refiller
	empty             *ttlcache.Cache[struct{}] // "<sale>\x00<sku>" until it may have stock again
	flows             sync.Map                  // sale id -> *flow, its moves under way
	moves, movedUnits atomic.Int64
}

// New returns a seller of segmented sales kept by eng in rdb (the client
// eng was made with).
func New(eng *inventory.Engine, rdb redis.UniversalClient, o Options) *Seller {
	if o.SoldOutTTL == 0 {
		o.SoldOutTTL = 500 * time.Millisecond
	}
	if o.Clock == nil {
		o.Clock = inventory.ClockFunc(time.Now)
	}
	return &Seller{eng: eng, rdb: rdb, o: o, empty: ttlcache.New[struct{}](maxSoldOutFlags)}
}

// Home returns the segment a user buys from: the same for every buy of the
// user, so the per-user limit sees everything the user holds.
func Home(segments []string, userID string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(userID))
	return segments[h.Sum32()%uint32(len(segments))]
}

// ParentOf returns the sale a segment id belongs to, or "" if id is not a
// segment id ("<sale>:<n>").
func ParentOf(id string) string {
	i := strings.LastIndexByte(id, ':')
	if i <= 0 {
		return ""
	}
	if _, err := strconv.ParseUint(id[i+1:], 10, 16); err != nil {
		return ""
	}
	return id[:i]
}

// Segments returns the segment ids of a sale, from the Seller's cache, from
// Redis, or from Options.Directory.
func (s *Seller) Segments(ctx context.Context, saleID string) ([]string, error) {
	if v, ok := s.dirs.Load(saleID); ok {
		return v.([]string), nil
	}
	if !inventory.ValidID(saleID) {
		return nil, &inventory.InvalidError{Field: "sale", Reason: "not an id"}
	}
	raw, err := s.rdb.Get(ctx, s.eng.Key(saleID, "segments")).Result()
	var segs []string
	switch {
	case err == nil:
		segs = strings.Split(raw, ",")
	case errors.Is(err, redis.Nil) && s.o.Directory != nil:
		if segs, err = s.o.Directory(ctx, saleID); err != nil {
			return nil, err
		}
		if len(segs) == 0 {
			return nil, &inventory.NotFoundError{Kind: "sale", IDs: []string{saleID}}
		}
		// Put it back, so the other Sellers find it (unless one did).
		_ = s.rdb.SetNX(ctx, s.eng.Key(saleID, "segments"), strings.Join(segs, ","), 0).Err()
	case errors.Is(err, redis.Nil):
		return nil, &inventory.NotFoundError{Kind: "sale", IDs: []string{saleID}}
	default:
		return nil, fmt.Errorf("segment: directory of %s: %w", saleID, err)
	}
	for _, id := range segs {
		if ParentOf(id) != saleID {
			return nil, fmt.Errorf("%w: directory of sale %s names %q", inventory.ErrCorrupt, saleID, id)
		}
	}
	s.dirs.Store(saleID, segs)
	return segs, nil
}

// Buy buys every line or none, for one user, in the user's home segment of
// r.SaleID (the sale, not a segment). When the home segment has too few
// units of a line, units are moved to it from the other segments and the
// buy is tried again; it fails with ErrSoldOut only when every segment
// together has too few, units this Seller is moving between segments
// counted (it waits for them to land). The receipt's Remaining is the home segment's, and
// its order's SaleID is the home segment's id (the id Cancel and the order
// stream know it by). A throttle (r.Throttle) counts the buy once, however
// often it is sent: its first attempt goes to Redis even if the engine
// flagged the home segment sold out, and the attempts after a refill go
// without the throttle.
func (s *Seller) Buy(ctx context.Context, r inventory.BuyRequest) (inventory.Receipt, error) {
	segs, err := s.Segments(ctx, r.SaleID)
	if err != nil {
		return inventory.Receipt{}, err
	}
	sale := r.SaleID
	if err := s.refuse(sale, r.Lines, r.IdempotencyKey); err != nil {
		return inventory.Receipt{}, err
	}
	r.SaleID = Home(segs, r.UserID)
	c, err := inventory.CheckBuy(r)
	if err != nil {
		return inventory.Receipt{}, err
	}
	return s.buyAtHome(ctx, sale, segs, c)
}

// BuyChecked is Buy for a buy checked already (inventory.CheckBuy), of
// the segmented sale c.SaleID(): it is not checked again, but moved to the
// buyer's home segment (CheckedBuy.InSale). An order id it carries must be
// of that segment.
func (s *Seller) BuyChecked(ctx context.Context, c inventory.CheckedBuy) (inventory.Receipt, error) {
	sale := c.SaleID()
	segs, err := s.Segments(ctx, sale)
	if err != nil {
		return inventory.Receipt{}, err
	}
	if err := s.refuse(sale, c.Lines(), c.IdempotencyKey()); err != nil {
		return inventory.Receipt{}, err
	}
	if c, err = c.InSale(Home(segs, c.UserID())); err != nil {
		return inventory.Receipt{}, err
	}
	return s.buyAtHome(ctx, sale, segs, c)
}

// buyAtHome buys c, made in its buyer's home segment of sale already,
// refilling the home segment from segs while it is short (see Buy).
func (s *Seller) buyAtHome(ctx context.Context, sale string, segs []string, c inventory.CheckedBuy) (inventory.Receipt, error) {
	if c.Throttled() {
		// The first attempt goes to the script, past the engine's sold-out
		// flags, so that the throttle counts this buy there; the attempts
		// after a refill are the same buy, and go without it.
		c = c.IgnoringSoldOutFlags()
	}
	for attempt := 0; ; attempt++ {
		rc, err := s.eng.BuyChecked(ctx, c)
		var short *inventory.SoldOutError
		if !errors.As(err, &short) || attempt == maxAttempts {
			return rc, err
		}
		for _, sku := range short.SKUs {
			enough, ferr := s.refill(ctx, sale, segs, c.SaleID(), sku, qtyOf(c.Lines(), sku))
			if ferr != nil {
				return inventory.Receipt{}, ferr
			}
			if !enough {
				return rc, err
			}
		}
		// Units are at home now, or were a moment ago: ask Redis, even if
		// the engine flagged the item before they came.
		c = c.IgnoringSoldOutFlags().WithoutThrottle()
	}
}

// maxAttempts bounds the buys one Buy sends: a buy that finds its home
// short is tried again after every refill, for as long as the segments
// together have the units; each time it loses the units it found, other
// buys got them, so the item is selling out meanwhile.
const maxAttempts = 64

func qtyOf(lines []inventory.Line, sku string) int64 {
	var n int64
	for _, l := range lines {
		if l.SKU == sku {
			n += l.Qty
		}
	}
	return n
}

// refiller runs one refill of a home segment's item at a time; gen counts
// the refills that moved units.
type refiller struct {
	mu  sync.Mutex
	gen atomic.Uint64
}

// refill brings at least need units of sku to the home segment, if the
// segments have them together, and reports whether the home segment may
// have them now. One refill of a segment's item runs at a time in this
// Seller; buys that find it short meanwhile wait for it and then try again
// without a refill of their own.
func (s *Seller) refill(ctx context.Context, sale string, segs []string, home, sku string, need int64) (bool, error) {
	v, _ := s.fills.LoadOrStore(home+"\x00"+sku, &refiller{})
	rf := v.(*refiller)
	gen := rf.gen.Load()
	rf.mu.Lock()
	defer rf.mu.Unlock()
	if rf.gen.Load() != gen {
		return true, nil // units came while this buy waited: try them
	}
	if s.refuse(sale, []inventory.Line{{SKU: sku, Qty: need}}, "") != nil {
		return false, nil // found empty everywhere while this buy waited
	}
	for {
		rem, total, err := s.remaining(ctx, sale, segs, sku, need)
		if err != nil {
			return false, err
		}
		if total < 0 {
			return true, nil // unlimited: the buy was short of something else
		}
		atHome := rem[slices.Index(segs, home)]
		if atHome >= need {
			return true, nil // another buy refilled it meanwhile
		}
		if total < need {
			return false, nil
		}
		for atHome < need {
			// Take from the segment with the most left: half of what it has
			// (so its own buyers keep the rest), and at least what is missing.
			from, most := -1, int64(0)
			for i, id := range segs {
				if id != home && rem[i] > most {
					from, most = i, rem[i]
				}
			}
			if from < 0 {
				break
			}
			want := max(need-atHome, (most+1)/2)
			n, err := s.move(ctx, segs[from], home, sku, want)
			if err != nil {
				return false, err
			}
			if n > 0 {
				rf.gen.Add(1)
			}
			rem[from] = 0 // whatever it had, it has less now: look elsewhere next
			atHome += n
		}
		if atHome >= need {
			return true, nil
		}
		// The units read elsewhere were sold or moved meanwhile (perhaps to
		// another home): they are not gone until a read says so.
	}
}

// remaining reads what is left of a limited sku in each segment and in all
// of them together (total -1: the sku is unlimited). A total short of need
// is read again until no move of the sale's units by this Seller ran during
// the read: a move's units are in no segment while it runs, and a read of
// several segments is not one instant, so units moving meanwhile may be
// missed. A segment missing from Redis (lost with its node) holds its units
// in the system of record: a short read rebuilds it (Engine.Stock) and reads
// again, and it counts as empty only if it cannot be rebuilt. Only a settled
// read says the item has too few, and only an empty one is flagged sold out.
func (s *Seller) remaining(ctx context.Context, sale string, segs []string, sku string, need int64) ([]int64, int64, error) {
	f := s.flow(sale)
	var rebuilt []string // missing segments this call rebuilt, or tried to
	for {
		started, running := f.mark()
		rem, err := s.eng.Remaining(ctx, sku, segs...)
		var lost *inventory.NotFoundError
		if err != nil && !errors.As(err, &lost) {
			return nil, 0, err
		}
		var total int64
		for _, r := range rem {
			if r < 0 {
				return rem, -1, nil
			}
			total += r
		}
		if total >= need {
			return rem, total, nil
		}
		if lost != nil && !containsAll(rebuilt, lost.IDs) {
			for _, id := range lost.IDs {
				if _, err := s.eng.Stock(ctx, id); err != nil && !errors.Is(err, inventory.ErrNotFound) {
					return nil, 0, err
				}
				rebuilt = append(rebuilt, id)
			}
			continue
		}
		now, idle := f.mark()
		if running == nil && now == started {
			if total == 0 {
				s.markEmpty(sale, sku)
			}
			return rem, total, nil
		}
		if idle != nil {
			select {
			case <-idle:
			case <-ctx.Done():
				return nil, 0, ctx.Err()
			}
		}
	}
}

// containsAll reports whether every id of ids is in set.
func containsAll(set, ids []string) bool {
	for _, id := range ids {
		if !slices.Contains(set, id) {
			return false
		}
	}
	return true
}

// flow counts a sale's moves under way in this Seller.
type flow struct {
	mu      sync.Mutex
	started uint64        // moves begun, ever
	running int           // moves begun and not ended
	idle    chan struct{} // closed when running drops to 0
}

func (f *flow) begin() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running == 0 {
		f.idle = make(chan struct{})
	}
	f.running++
	f.started++
}

func (f *flow) end() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running--; f.running == 0 {
		close(f.idle)
	}
}

// mark returns the moves begun so far and, while some run, a channel
// closed once none does (nil: none runs).
func (f *flow) mark() (uint64, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running == 0 {
		return f.started, nil
	}
	return f.started, f.idle
}

// flow returns the moves of a sale's units under way in this Seller.
func (s *Seller) flow(sale string) *flow {
	if v, ok := s.flows.Load(sale); ok {
		return v.(*flow)
	}
	v, _ := s.flows.LoadOrStore(sale, &flow{})
	return v.(*flow)
}

// move is Engine.Move, counted in the sale's flow while it runs and in
// Moved once it moved something.
func (s *Seller) move(ctx context.Context, from, to, sku string, qty int64) (int64, error) {
	f := s.flow(ParentOf(from))
	f.begin()
	defer f.end()
	n, err := s.eng.Move(ctx, from, to, sku, qty)
	if n > 0 {
		s.moves.Add(1)
		s.movedUnits.Add(n)
	}
	return n, err
}

// finishMoves is Engine.FinishMoves, counted in the sale's flow while it
// runs.
func (s *Seller) finishMoves(ctx context.Context, segment string) error {
	f := s.flow(ParentOf(segment))
	f.begin()
	defer f.end()
	_, err := s.eng.FinishMoves(ctx, segment)
	return err
}

// Moved returns how many moves this Seller made to refill home segments
// and rebalance, and the units they moved.
func (s *Seller) Moved() (moves, units int64) {
	return s.moves.Load(), s.movedUnits.Load()
}

// refuse fails a buy of an item this Seller found empty in every segment
// less than SoldOutTTL ago. Buys with an idempotency key always go to
// Redis: a retry must find its order.
func (s *Seller) refuse(sale string, lines []inventory.Line, key string) error {
	if s.o.SoldOutTTL < 0 || key != "" {
		return nil
	}
	now := s.o.Clock.Now().UnixNano()
	var skus []string
	for _, l := range lines {
		if _, ok := s.empty.Get(sale+"\x00"+l.SKU, now); ok {
			skus = append(skus, l.SKU)
		}
	}
	if skus != nil {
		return &inventory.SoldOutError{SKUs: skus}
	}
	return nil
}

// markEmpty flags an item a settled read found empty in every segment
// (see remaining).
func (s *Seller) markEmpty(sale, sku string) {
	if s.o.SoldOutTTL > 0 {
		now := s.o.Clock.Now()
		s.empty.Set(sale+"\x00"+sku, struct{}{}, now.Add(s.o.SoldOutTTL).UnixNano(), now.UnixNano())
	}
}

// forget clears the sold-out flags of a sale.
func (s *Seller) forget(sale string) {
	s.empty.DeletePrefix(sale + "\x00")
}
