package inventory

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
)

// An order record, the value of an order in the sale's orders hash, is
//
//	<status>|<user>|<created, unix ms>|<lines>|<idempotency key>
//
// status "p" (pending) or "c" (cancelled); lines "A=1,B=2". Ids never
// contain '|', ',' or '='; the key comes last because it may contain '|'.
// buy.lua and cancel.lua write records; only this file reads them in Go.

func encodeRecord(o Order) string {
	status := "p"
	if o.Status == OrderCancelled {
		status = "c"
	}
	return status + "|" + o.UserID + "|" + strconv.FormatInt(o.CreatedAt.UnixMilli(), 10) +
		"|" + formatLines(o.Items) + "|" + o.IdempotencyKey
}

func decodeRecord(orderID, saleID, rec string) (Order, error) {
	parts := strings.SplitN(rec, "|", 5)
	if len(parts) != 5 {
		return Order{}, fmt.Errorf("%w: order record %q", ErrCorrupt, truncate(rec, 200))
	}
	o := Order{ID: orderID, SaleID: saleID, UserID: parts[1], IdempotencyKey: parts[4]}
	switch parts[0] {
	case "p":
		o.Status = OrderPending
	case "c":
		o.Status = OrderCancelled
	default:
		return Order{}, fmt.Errorf("%w: order record %q", ErrCorrupt, truncate(rec, 200))
	}
	ms, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return Order{}, fmt.Errorf("%w: order record %q", ErrCorrupt, truncate(rec, 200))
	}
	o.CreatedAt = time.UnixMilli(ms).UTC()
	if o.Items, err = parseLines(parts[3], false); err != nil {
		return Order{}, fmt.Errorf("%w: order record %q: %v", ErrCorrupt, truncate(rec, 200), err)
	}
	return o, nil
}

// parseLines decodes "A=1,B=2". With signed, quantities may be -1 (the
// stock of an unlimited item in a "created" event).
func parseLines(s string, signed bool) ([]Line, error) {
	if s == "" {
		return nil, fmt.Errorf("no lines")
	}
	fields := strings.Split(s, ",")
	lines := make([]Line, 0, len(fields))
	for _, f := range fields {
		sku, q, ok := strings.Cut(f, "=")
		if !ok || !ValidID(sku) {
			return nil, fmt.Errorf("bad line %q", f)
		}
		qty, err := strconv.ParseInt(q, 10, 64)
		if err != nil || qty < 0 && !(signed && qty == Unlimited) {
			return nil, fmt.Errorf("bad quantity in %q", f)
		}
		lines = append(lines, Line{SKU: sku, Qty: qty})
	}
	return lines, nil
}

// An order's record is kept in the orders hash under its group, the order
// id without its last orderGroupTail characters, its tail; the group's
// value is its orders as "<tail>|<record>" joined by newlines, in the order
// they were made (order.lua says the same for the scripts). The engine
// gives the buys of one script call ids of one group (idGroup), so that a
// call writes one field of the hash rather than one per order: half the
// entries a buy leaves in Redis (docs/performance.md, "One entry per
// buy"). A value written before lines left their group out may hold lines
// "<order id>|<record>" too (lineOrder tells them apart).
const orderGroupTail = 4

// OrderGroup returns the field of its sale's orders hash (Engine.Key(sale,
// "orders")) that holds the order's record, with the other orders of its
// group: for an operator, or a test, that reads Redis itself.
func OrderGroup(orderID string) string { return orderGroup(orderID) }

// OrderRecords turns the fields of a sale's orders hash (group -> its
// orders) into order id -> record (the record as in the stream's events,
// see events.go). A group's value that holds something else than its
// orders is under its group's name followed by "?bad".
func OrderRecords(groups map[string]string) map[string]string {
	out := make(map[string]string, len(groups))
	for g, v := range groups {
		groupOrders(g, v, out)
	}
	return out
}

// orderGroup is the field of the orders hash that holds the order's record.
func orderGroup(orderID string) string {
	return orderID[:max(len(orderID)-orderGroupTail, 0)]
}

// ownField reports whether a field of the orders hash is an order id rather
// than a group: the record of an order stored before the engine kept its
// orders by group, the field's value the record alone (order.lua). An order
// id ends in a ULID, a group in all but its last orderGroupTail characters.
func ownField(field string) bool {
	i := strings.LastIndex(field, orderIDSep)
	return i >= 0 && len(field)-i-1 == ulid.EncodedSize
}

// recordOf returns an order's record from HMGET of the orders hash's field
// of its group and its own field (ownField), in that order.
func recordOf(orderID string, vals []any) (string, bool) {
	var group, own string
	if len(vals) == 2 {
		group, _ = vals[0].(string)
		own, _ = vals[1].(string)
	}
	if rec, ok := recordIn(group, orderID); ok && group != "" {
		return rec, true
	}
	return own, own != ""
}

// recordFields are the fields of the orders hash recordOf reads.
func recordFields(orderID string) []string { return []string{orderGroup(orderID), orderID} }

// lineOrder splits a line of group's value into the tail of its order id
// (the id's last orderGroupTail characters) and its record. The line names
// its order by the tail or, written before lines left their group out, by
// the whole id; ok is false for a line that is neither of an order of
// group.
func lineOrder(group, line string) (tail, rec string, ok bool) {
	id, rec, ok := strings.Cut(line, "|")
	switch {
	case !ok:
		return "", "", false
	case len(id) == orderGroupTail:
		return id, rec, true
	case len(id) > orderGroupTail && orderGroup(id) == group:
		return id[len(group):], rec, true
	}
	return "", "", false
}

// orderTail is the last orderGroupTail characters of an order id, which
// name it in its group's value.
func orderTail(orderID string) string {
	return orderID[len(orderGroup(orderID)):]
}

// recordIn returns the record of orderID in its group's value v.
func recordIn(v, orderID string) (string, bool) {
	group := orderGroup(orderID)
	tail := orderID[len(group):]
	for rest := v; ; {
		line, next, more := strings.Cut(rest, "\n")
		if t, rec, ok := lineOrder(group, line); ok && t == tail {
			return rec, true
		}
		if !more {
			return "", false
		}
		rest = next
	}
}

// groupOrders adds the orders a group's value holds to into, as order id
// -> record. If a line is not an order of this group (no '|', an id of
// another group, an order seen before in it), the whole value is added
// too, under badGroup(group), a name of the group no order id has: a
// record that does not decode, which a repair replaces.
func groupOrders(group, v string, into map[string]string) {
	if ownField(group) { // an order's own field (the field is the order id)
		if _, seen := into[group]; seen {
			into[badGroup(orderGroup(group))] = v
		} else {
			into[group] = v
		}
		return
	}
	for line := range strings.SplitSeq(v, "\n") {
		tail, rec, ok := lineOrder(group, line)
		id := group + tail
		if _, seen := into[id]; !ok || seen {
			into[badGroup(group)] = v
			continue
		}
		into[id] = rec
	}
}

// badGroup names a group's value that holds something other than its
// orders (groupOrders); its group is the group (orderGroup).
func badGroup(group string) string { return group + "?bad" }

// groupValues turns order id, record pairs into the orders hash's group,
// value pairs, each group's orders in the order of their ids.
func groupValues(orders map[string]string) map[string]string {
	ids := make([]string, 0, len(orders))
	for id := range orders {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	lines := map[string][]string{}
	for _, id := range ids {
		g := orderGroup(id)
		lines[g] = append(lines[g], orderTail(id)+"|"+orders[id])
	}
	out := make(map[string]string, len(lines))
	for g, l := range lines {
		out[g] = strings.Join(l, "\n")
	}
	return out
}
