package inventory

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ErrInFlight: Repair found events of the sale that the system of record has
// not applied yet, or an event was appended while it worked. Nothing was
// written; try again once the order consumer has caught up.
var ErrInFlight = errors.New("seckill: sale has events in flight")

// InFlightError says why Repair did not repair. It matches ErrInFlight.
type InFlightError struct {
	SaleID string
	// Raced: an event was appended to the sale's stream after Repair found
	// it settled and read the system of record (a buy, cancel, restock or
	// pause ran meanwhile). Otherwise a consumer group has entries pending
	// (Pending > 0) or not yet delivered.
	Raced bool
	// Group is the consumer group that is behind ("" if the stream has no
	// group at all, so nobody has read it).
	Group   string
	Pending int64
}

func (e *InFlightError) Error() string {
	switch {
	case e.Raced:
		return fmt.Sprintf("seckill: sale %s changed while being repaired (an event was appended)", e.SaleID)
	case e.Group == "":
		return fmt.Sprintf("seckill: sale %s has events in flight: its stream has entries and no consumer group", e.SaleID)
	case e.Pending > 0:
		return fmt.Sprintf("seckill: sale %s has events in flight: %d entries pending in consumer group %s", e.SaleID, e.Pending, e.Group)
	}
	return fmt.Sprintf("seckill: sale %s has events in flight: entries not yet delivered to consumer group %s", e.SaleID, e.Group)
}

// Is reports whether target is ErrInFlight.
func (e *InFlightError) Is(target error) bool { return target == ErrInFlight }

// RepairField names a quantity Repair sets from the system of record.
type RepairField string

// The quantities of a RepairChange. Item quantities carry the item's sku;
// sale quantities have SKU "".
const (
	RepairRemaining   RepairField = "remaining"    // units left to sell (-1 unlimited)
	RepairStocked     RepairField = "stocked"      // units stocked in total (-1 unlimited)
	RepairSoldCounter RepairField = "sold_counter" // units sold, counted for an unlimited item
	// RepairSold is the units of the item in live order records; Fixed is
	// how many order records holding it were written or removed.
	RepairSold RepairField = "sold"
	// RepairHeld is the units of the item the per-user counts hold; Fixed
	// is how many buyers' counts were written or removed.
	RepairHeld RepairField = "held"
	// RepairIdempotencyKeys is how many idempotency keys the sale has;
	// Fixed is how many were written or removed.
	RepairIdempotencyKeys RepairField = "idempotency_keys"
	// RepairPayments is how many orders await payment (the deadlines);
	// Fixed is how many deadlines and paid refs were written or removed.
	RepairPayments RepairField = "payments"
	RepairPaused   RepairField = "paused" // 1 paused, 0 not
	// RepairOrderRecords is the sale's count of the order records Redis
	// holds (OrderCounts).
	RepairOrderRecords RepairField = "orders"
	// RepairSpentTokens is how many single-use tokens the sale's orders
	// spent whose life is not over (Snapshot.SpentTokens); Before is how
	// many of them Redis held spent. A repair only ever adds marks.
	RepairSpentTokens RepairField = "spent_tokens"
	RepairLimit       RepairField = "limit" // per-user limit
	RepairStart       RepairField = "start" // starts at, unix ms (0 none)
	RepairEnd         RepairField = "end"   // ends at, unix ms (0 none)
)

// RepairChange is one quantity Repair changed: its value in Redis before
// and after (the system of record's).
type RepairChange struct {
	SKU           string // "" for a quantity of the whole sale
	Field         RepairField
	Before, After int64
	// Fixed is how many Redis fields were written or removed for it: 1 for
	// a counter, the number of records for sold, held and idempotency keys
	// (which may change even when the totals Before and After agree).
	Fixed int
}

// Repaired is what Repair changed in Redis, in the sale's item order. No
// Changes means Redis agreed with the system of record: nothing was written.
type Repaired struct {
	SaleID  string
	Changes []RepairChange
}

// Changed reports whether Repair wrote anything.
func (r Repaired) Changed() bool { return len(r.Changes) > 0 }

// Outcome codes of repair.lua beyond the shared ones (its contract lists them).
const (
	codeRepairMoved    = 12 // the stream generated an event after the look
	codeRepairInFlight = 14 // a consumer group has pending or undelivered entries
	codeRepairChanged  = 15 // a value is not what was read (another repair came first)
	repairAttempts     = 3
)

// Repair sets the sale's state in Redis to what the system of record says,
// where they differ: every item's remaining stock (stocked minus the units
// of live orders) and stocked total, the per-user counts, the order records,
// the idempotency keys, and the paused flag, limit and window. The database
// is the system of record; Redis can lose writes (a failover to a replica
// that was behind, a restore, a counter changed by hand) that reconciliation
// then reports as drift.
//
// Repair never writes while the sale has events in flight: it first checks
// that every consumer group of the sale's stream has acknowledged every
// entry (the consumer acknowledges only what it has committed), then loads
// the snapshot from from (its EventsApplied is not used), reads what Redis
// holds, and hands the differences to one script. The script writes only if
// the stream has generated no event since that first check, still no group
// is behind, and every value is still what was read; otherwise it writes
// nothing and Repair returns an error matching ErrInFlight
// (*InFlightError). Every change to a sale appends to its stream in the same
// script, so a buy that races the repair either came first (the script sees
// the stream moved) or comes after (it sees the repaired state): it is never
// lost. A Repair that finds nothing to change writes nothing. If the
// connection fails while the writing script is sent, whether it ran is
// unknown: the error says so, and the next reconciliation pass shows which.
//
// The sale must be in Redis (a missing sale is rebuilt by the engine on use,
// not repaired: ErrNotFound) and its items must be the snapshot's (else
// ErrCorrupt). from nil means Options.Loader.
func (e *Engine) Repair(ctx context.Context, saleID string, from Loader) (Repaired, error) {
	if err := validateID("sale", saleID); err != nil {
		return Repaired{}, err
	}
	if from == nil {
		from = e.loader
	}
	if from == nil {
		return Repaired{}, errors.New("seckill: Repair needs a Loader to read the system of record")
	}
	k := e.keys(saleID)
	keys := []string{k.sale, k.bought, k.orders, k.idem, k.events, k.deadlines, k.paid, k.token}
	for attempt := 1; ; attempt++ {
		reply, err := e.run.run(ctx, repairScript, keys, "")
		if err != nil {
			return Repaired{}, err
		}
		if err := repairOutcome(saleID, reply); err != nil {
			return Repaired{}, err
		}
		settled := str(at(reply, 1))
		snap, err := from.LoadSale(ctx, saleID)
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				return Repaired{}, &NotFoundError{Kind: "sale", IDs: []string{saleID}}
			}
			return Repaired{}, fmt.Errorf("seckill: load sale %s: %w", saleID, err)
		}
		want, err := stateOf(saleID, snap)
		if err != nil {
			return Repaired{}, err
		}
		cur, err := e.readState(ctx, k)
		if err != nil {
			return Repaired{}, err
		}
		ops, changes, err := diffState(saleID, snap.Sale, cur, want.hashes())
		if err != nil {
			return Repaired{SaleID: saleID}, err
		}
		spentOps, spent, err := e.spentRepair(ctx, k, want.spent)
		if err != nil {
			return Repaired{}, err
		}
		if len(spentOps) > 0 {
			ops, changes = append(ops, spentOps...), append(changes, spent)
		}
		// The floor, as a rebuild raises it (Snapshot.NewestEvent): a
		// stream that survived behind the database must not hand out its
		// ids again.
		floor := ""
		if snap.NewestEvent != "" && !isEventID(snap.NewestEvent) {
			return Repaired{}, fmt.Errorf("%w: snapshot of sale %s: newest event id %q", ErrCorrupt, saleID, snap.NewestEvent)
		} else if CompareEventIDs(snap.NewestEvent, settled) > 0 {
			floor = snap.NewestEvent
		}
		if len(ops) == 0 && floor == "" {
			return Repaired{SaleID: saleID}, nil
		}
		reply, err = e.run.run(ctx, repairScript, keys, append([]any{settled, floor, e.scriptNow()}, ops...)...)
		if err != nil {
			var refused redis.Error // a reply: the script failed before its first write
			if errors.As(err, &refused) || errors.Is(err, ErrCorrupt) {
				return Repaired{}, err
			}
			return Repaired{}, fmt.Errorf("seckill: repair of sale %s may or may not have been written: %w", saleID, err)
		}
		if code(reply) == codeRepairChanged && attempt < repairAttempts {
			continue // another repair wrote first: look again
		}
		if err := repairOutcome(saleID, reply); err != nil {
			return Repaired{}, err
		}
		return Repaired{SaleID: saleID, Changes: changes}, nil
	}
}

// repairOutcome decodes the codes of repair.lua other than success.
func repairOutcome(saleID string, reply []any) error {
	switch code(reply) {
	case codeOK:
		if _, ok := at(reply, 1).(string); ok {
			return nil
		}
	case codeMissing:
		return &NotFoundError{Kind: "sale", IDs: []string{saleID}}
	case codeRepairMoved:
		return &InFlightError{SaleID: saleID, Raced: true}
	case codeRepairInFlight:
		pending, _ := at(reply, 2).(int64)
		return &InFlightError{SaleID: saleID, Group: str(at(reply, 1)), Pending: pending}
	case codeRepairChanged:
		return fmt.Errorf("%w: sale %s: %s kept changing while being repaired; retry", ErrUnavailable, saleID, str(at(reply, 1)))
	}
	return unexpected(repairScript, reply)
}

// The four hashes of a sale as field -> value, indexed like repair.lua's
// ops, and the payment step's deadlines (order id -> pay_by ms, a zset) and
// paid hash.
const (
	hashSale = iota
	hashBought
	hashOrders
	hashIdem
	hashDeadlines
	hashPaid
	// hashOrderGroups is the orders hash itself (group -> its orders, see
	// record.go); hashOrders is the orders it holds (order id -> record),
	// which a repair compares, then writes by group.
	hashOrderGroups
)

type saleHashes [7]map[string]string

// hashes is the state as the hashes hold it.
func (st saleState) hashes() saleHashes {
	var h saleHashes
	for i, pairs := range [6][]any{st.sale, st.bought, st.orders, st.idem, st.deadlines, st.paid} {
		h[i] = make(map[string]string, len(pairs)/2)
		for j := 0; j+1 < len(pairs); j += 2 {
			h[i][fmt.Sprint(pairs[j])] = fmt.Sprint(pairs[j+1])
		}
	}
	h[hashOrderGroups] = groupValues(h[hashOrders])
	return h
}

// readState reads the sale's hashes from Redis, the large ones with HSCAN
// so that a big sale does not block Redis. The reads are not one atomic
// picture; repair.lua checks every value it changes.
func (e *Engine) readState(ctx context.Context, k saleKeys) (saleHashes, error) {
	var h saleHashes
	var err error
	if h[hashSale], err = e.rdb.HGetAll(ctx, k.sale).Result(); err != nil {
		return h, fmt.Errorf("seckill: read %s: %w", k.sale, err)
	}
	for i, key := range map[int]string{hashBought: k.bought, hashOrderGroups: k.orders, hashIdem: k.idem, hashPaid: k.paid} {
		page := int64(1000)
		if i == hashOrderGroups {
			page = orderScanPage // large values (see orderScanPage)
		}
		if h[i], err = e.scanHash(ctx, key, page); err != nil {
			return h, err
		}
	}
	h[hashOrders] = make(map[string]string, len(h[hashOrderGroups]))
	for g, v := range h[hashOrderGroups] {
		groupOrders(g, v, h[hashOrders])
	}
	h[hashDeadlines], err = e.scanDeadlines(ctx, k.deadlines)
	return h, err
}

// scanHash reads the hash at key whole, page fields an HSCAN.
func (e *Engine) scanHash(ctx context.Context, key string, page int64) (map[string]string, error) {
	out := map[string]string{}
	var cursor uint64
	for {
		kv, next, err := e.rdb.HScan(ctx, key, cursor, "", page).Result()
		if err != nil {
			return nil, fmt.Errorf("seckill: scan %s: %w", key, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}

// diffState returns repair.lua's ops that turn cur into want, and what they
// change. The definition's items must agree: a sale whose skus differ is
// not a drift a repair can fix.
func diffState(saleID string, def Sale, cur, want saleHashes) (ops []any, changes []RepairChange, err error) {
	got, perr := parseLines(cur[hashSale]["items"], true)
	skus := make([]string, len(def.Items))
	for i, it := range def.Items {
		skus[i] = it.SKU
	}
	if perr != nil || !slices.EqualFunc(got, def.Items, func(l Line, it Item) bool { return l.SKU == it.SKU }) {
		return nil, nil, fmt.Errorf("%w: sale %s: items in redis %q are not the system of record's %s; not repairable",
			ErrCorrupt, saleID, truncate(cur[hashSale]["items"], 200), truncate(strings.Join(skus, ","), 200))
	}

	// Ops, in a stable order, and which skus each touches.
	fixed := map[string]map[RepairField]int{}
	fix := func(sku string, f RepairField) {
		if fixed[sku] == nil {
			fixed[sku] = map[RepairField]int{}
		}
		fixed[sku][f]++
	}
	groups := map[string]bool{} // the order groups to write
	for h := hashSale; h <= hashPaid; h++ {
		var fields []string
		for f := range want[h] {
			fields = append(fields, f)
		}
		if h != hashSale { // sale fields not in the snapshot are not ours to remove
			for f := range cur[h] {
				if _, ok := want[h][f]; !ok {
					fields = append(fields, f)
				}
			}
		}
		slices.Sort(fields)
		for _, f := range fields {
			before, after := cur[h][f], want[h][f]
			// Move records are Engine.Move's, not stock: a record the
			// database shows pending may have been finished in Redis.
			if before == after || h == hashSale && (f == "items" || strings.HasPrefix(f, movePrefix)) ||
				h == hashBought && zero(before) && zero(after) {
				continue
			}
			if h == hashOrders {
				groups[orderGroup(f)] = true // written whole, below
			} else {
				ops = append(ops, h+1, f, before, after)
			}
			switch h {
			case hashSale:
				if f == "pay" || strings.HasPrefix(f, "a:") { // the payment step's
					fix("", RepairPayments)
				} else {
					fix("", RepairField(f))
				}
			case hashBought:
				_, sku, _ := strings.Cut(f, "|")
				fix(sku, RepairHeld)
			case hashOrders:
				touched := map[string]bool{}
				for _, rec := range []string{before, after} {
					if o, err := decodeRecord(f, saleID, rec); err == nil {
						for _, l := range o.Items {
							touched[l.SKU] = true
						}
					}
				}
				if len(touched) == 0 {
					touched[""] = true
				}
				for sku := range touched {
					fix(sku, RepairSold)
				}
			case hashIdem:
				fix("", RepairIdempotencyKeys)
			case hashDeadlines, hashPaid:
				fix("", RepairPayments)
			}
		}
	}
	// A group written holds every order of it the system of record has:
	// an order's own field of it (ownField, stored before order groups)
	// goes, whether its record changed or not.
	for _, g := range slices.Sorted(maps.Keys(groups)) {
		ops = append(ops, hashOrders+1, g, cur[hashOrderGroups][g], want[hashOrderGroups][g])
	}
	for _, f := range slices.Sorted(maps.Keys(cur[hashOrderGroups])) {
		if ownField(f) && groups[orderGroup(f)] {
			ops = append(ops, hashOrders+1, f, cur[hashOrderGroups][f], "")
		}
	}
	if len(ops) == 0 {
		return nil, nil, nil
	}

	was, is := tally(saleID, cur), tally(saleID, want)
	num := func(h saleHashes, field string) int64 {
		n, _ := strconv.ParseInt(h[hashSale][field], 10, 64)
		return n
	}
	counter := func(sku string, f RepairField, field string) {
		if fixed[""][RepairField(field)] > 0 {
			changes = append(changes, RepairChange{SKU: sku, Field: f, Before: num(cur, field), After: num(want, field), Fixed: 1})
		}
	}
	for _, f := range []RepairField{RepairLimit, RepairStart, RepairEnd, RepairPaused} {
		counter("", f, string(f))
	}
	// The count of order records: a sale stored before it was kept has
	// none, which is no drift (HLEN counted its records); it is set all
	// the same.
	if _, kept := cur[hashSale][string(RepairOrderRecords)]; kept {
		counter("", RepairOrderRecords, string(RepairOrderRecords))
	}
	if n := fixed[""][RepairPayments]; n > 0 {
		changes = append(changes, RepairChange{Field: RepairPayments,
			Before: int64(len(cur[hashDeadlines])), After: int64(len(want[hashDeadlines])), Fixed: n})
	}
	if n := fixed[""][RepairIdempotencyKeys]; n > 0 {
		changes = append(changes, RepairChange{Field: RepairIdempotencyKeys,
			Before: int64(len(cur[hashIdem])), After: int64(len(want[hashIdem])), Fixed: n})
	}
	// Items in the sale's order, then skus only stray records name.
	order := slices.Clone(skus)
	var stray []string
	for sku := range fixed {
		if sku != "" && !slices.Contains(skus, sku) {
			stray = append(stray, sku)
		}
	}
	slices.Sort(stray)
	if fixed[""][RepairSold] > 0 {
		stray = append(stray, "") // records that name no sku we could read
	}
	for _, sku := range append(order, stray...) {
		if sku != "" {
			counter(sku, RepairRemaining, "r:"+sku)
			counter(sku, RepairStocked, "t:"+sku)
			counter(sku, RepairSoldCounter, "s:"+sku)
		}
		if n := fixed[sku][RepairSold]; n > 0 {
			changes = append(changes, RepairChange{SKU: sku, Field: RepairSold, Before: was.sold[sku], After: is.sold[sku], Fixed: n})
		}
		if n := fixed[sku][RepairHeld]; n > 0 {
			changes = append(changes, RepairChange{SKU: sku, Field: RepairHeld, Before: was.held[sku], After: is.held[sku], Fixed: n})
		}
	}
	return ops, changes, nil
}

// zero: a per-user count that holds nothing ("" absent, or "0").
func zero(v string) bool { return v == "" || v == "0" }

// unitTally is, per sku, the units of live order records and of per-user counts.
type unitTally struct{ sold, held map[string]int64 }

func tally(saleID string, h saleHashes) unitTally {
	t := unitTally{sold: map[string]int64{}, held: map[string]int64{}}
	for id, rec := range h[hashOrders] {
		o, err := decodeRecord(id, saleID, rec)
		if err != nil || o.Status == OrderCancelled {
			continue
		}
		for _, l := range o.Items {
			t.sold[l.SKU] += l.Qty
		}
	}
	for f, v := range h[hashBought] {
		sku, n := heldUnits(f, v)
		t.held[sku] += n
	}
	return t
}
