package inventory

import (
	"fmt"
	"strconv"
	"strings"
	"time"
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
