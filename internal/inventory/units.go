package inventory

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"strconv"
	"strings"
)

// fieldSet is the fields of a hash one scan has seen, to count a field
// HSCAN returns more than once (a hash rehashing during the scan) once.
// It keeps a 64-bit hash of each name, not the name: eight bytes a field
// rather than the field's string. Two names of one hash collide with odds
// of about n²/2⁶⁵ (1e-7 a scan at a million fields), and then the second
// is skipped, counted as the first. The hash is seeded anew for every
// scan (newFieldSet), so a collision is of that scan alone: the next scan
// of the same fields hashes them apart, and a reconciliation that found a
// drift looks again before it acts.
type fieldSet struct {
	seed maphash.Seed
	seen map[uint64]struct{}
}

func newFieldSet() fieldSet {
	return fieldSet{seed: maphash.MakeSeed(), seen: map[uint64]struct{}{}}
}

// add records field and reports whether it is new to the scan.
func (s fieldSet) add(field string) bool {
	h := maphash.String(s.seed, field)
	if _, ok := s.seen[h]; ok {
		return false
	}
	s.seen[h] = struct{}{}
	return true
}

// has reports whether the scan has seen field.
func (s fieldSet) has(field string) bool {
	_, ok := s.seen[maphash.String(s.seed, field)]
	return ok
}

// orderUnits sums, per sku, the units of live order records as the pages
// of an HSCAN of a sale's orders hash arrive (UnitsInOrders), keeping of
// each field only its hash (fieldSet), so that a sale of millions of
// orders is not held in memory whole. A group's value is checked as
// groupOrders does: every line an order of the group, no id twice. An
// order's own field (ownField) is kept, id -> record, until the scan
// ends (own fields are of sales stored before order groups: few): an
// order both there and in its group is corrupt, which finish checks.
type orderUnits struct {
	saleID string
	out    map[string]int64
	fields fieldSet
	own    map[string]string // own fields: order id -> record
	ids    []string          // the tails of one group's value (reused)
}

func newOrderUnits(saleID string) *orderUnits {
	return &orderUnits{saleID: saleID, out: map[string]int64{}, fields: newFieldSet()}
}

// page adds one HSCAN page (field, value, ...). A field seen before in the
// scan is skipped.
func (u *orderUnits) page(kv []string) error {
	for i := 0; i+1 < len(kv); i += 2 {
		f, v := kv[i], kv[i+1]
		if !u.fields.add(f) {
			continue
		}
		if ownField(f) {
			if u.own == nil {
				u.own = map[string]string{}
			}
			u.own[f] = v
			continue
		}
		if err := u.group(f, v); err != nil {
			return err
		}
	}
	return nil
}

// group adds the live orders of group g's value v.
func (u *orderUnits) group(g, v string) error {
	u.ids = u.ids[:0]
	for rest, more := v, true; more; {
		var line string
		line, rest, more = strings.Cut(rest, "\n")
		tail, _, ok := lineOrder(g, line)
		if !ok {
			return badGroupError(g, v)
		}
		u.ids = append(u.ids, tail)
	}
	if len(u.ids) > 1 {
		slices.Sort(u.ids)
		for i := 1; i < len(u.ids); i++ {
			if u.ids[i] == u.ids[i-1] {
				return badGroupError(g, v)
			}
		}
	}
	for rest, more := v, true; more; {
		var line string
		line, rest, more = strings.Cut(rest, "\n")
		_, rec, _ := lineOrder(g, line)
		if err := u.add(rec); err != nil {
			return err
		}
	}
	return nil
}

// add adds the units of an order's record if it is live.
func (u *orderUnits) add(rec string) error {
	o, err := decodeRecord("", u.saleID, rec)
	if err != nil {
		return err
	}
	if o.Status == OrderCancelled {
		return nil
	}
	for _, l := range o.Items {
		u.out[l.SKU] += l.Qty
	}
	return nil
}

// badGroupError: group g's value v holds something other than its orders.
func badGroupError(g, v string) error {
	return fmt.Errorf("%w: order group %s holds %q", ErrCorrupt, g, truncate(v, 200))
}

// ownGroupsRead is how many groups finish reads with one HMGET.
const ownGroupsRead = 128

// finish adds the own fields once the scan of the hash at key is over. An
// own field whose group the scan also found is read again (the scan kept
// no values): if the group holds the order too, the order is in two
// fields, corrupt. A group the scan did not find is not read: what was
// written after the scan passed is not of it.
func (u *orderUnits) finish(ctx context.Context, rdb Client, key string) error {
	var groups []string
	for id := range u.own {
		if g := orderGroup(id); u.fields.has(g) {
			groups = append(groups, g)
		}
	}
	slices.Sort(groups)
	groups = slices.Compact(groups)
	values := make(map[string]string, len(groups))
	for len(groups) > 0 {
		n := min(len(groups), ownGroupsRead)
		pipe := rdb.Pipeline() // (Client has no HMGET of its own)
		read := pipe.HMGet(ctx, key, groups[:n]...)
		_, _ = pipe.Exec(ctx)
		vals, err := read.Result()
		if err != nil {
			return fmt.Errorf("seckill: read order groups of sale %s: %w", u.saleID, err)
		}
		for i, v := range vals {
			if s, ok := v.(string); ok {
				values[groups[i]] = s
			}
		}
		groups = groups[n:]
	}
	for id, rec := range u.own {
		g := orderGroup(id)
		if v, ok := values[g]; ok {
			if _, twice := recordIn(v, id); twice {
				return badGroupError(g, v)
			}
		}
		if err := u.add(rec); err != nil {
			return err
		}
	}
	return nil
}

// heldUnits is the sku and units of a per-user count: field
// "<user>|<sku>", value the units. A value that is no integer holds 0.
func heldUnits(field, v string) (sku string, n int64) {
	_, sku, _ = strings.Cut(field, "|")
	n, _ = strconv.ParseInt(v, 10, 64)
	return sku, n
}

// heldScanPage is how many per-user counts one HSCAN of UnitsHeld asks for.
const heldScanPage = 1000

// UnitsHeld sums, per sku, the units the sale's per-user counts hold: what
// buyers hold according to the counts the per-user limit is checked
// against. With nothing lost, it equals UnitsInOrders. It scans every count
// (HSCAN), summing each page as it arrives: for reconciliation, not for a
// hot path.
func (e *Engine) UnitsHeld(ctx context.Context, saleID string) (map[string]int64, error) {
	if err := validateID("sale", saleID); err != nil {
		return nil, err
	}
	key := e.keys(saleID).bought
	out := map[string]int64{}
	fields := newFieldSet()
	var cursor uint64
	for {
		kv, next, err := e.rdb.HScan(ctx, key, cursor, "", heldScanPage).Result()
		if err != nil {
			return nil, fmt.Errorf("seckill: scan %s: %w", key, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if fields.add(kv[i]) {
				sku, n := heldUnits(kv[i], kv[i+1])
				out[sku] += n
			}
		}
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}
