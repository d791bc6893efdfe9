package inventory

import (
	"strings"

	"github.com/oklog/ulid/v2"
)

// saleTableField, saleTableValue: a field every sale hash is made with
// (create.lua, a rebuild's staging), whose value is longer than Redis's
// default hash-max-listpack-value (64 bytes), so that Redis keeps the
// hash as a hash table from its creation: every buy.lua call reads
// eight fields of it and writes two, and in a listpack each of those scans
// the hash's fields one by one (2.5% of a call of one buy, on a sale of
// one item; a sale of more than a few items is a table anyway, its "items"
// being longer than 64 bytes). The buy rules never read it; a sale
// made without it (before the engine wrote it, or on a Redis whose
// hash-max-listpack-value is larger) is only slower.
const (
	saleTableField = "table"
	saleTableValue = "longer than 64 bytes, so that Redis keeps this hash as a hash table"
)

// Every Redis key the engine touches is built here. All keys of one sale share
// the hash tag {<prefix>:<sale>} so that every script, which only ever touches
// the keys of one sale, runs on Redis Cluster: they all hash to one slot.
//
//	{p:s}:sale      hash   sale definition ("limit", "start", "end", "paused",
//	                       "items": "A=100,B=-1", the skus in order)
//	                       and per item "r:<sku>" remaining (-1 unlimited),
//	                       "t:<sku>" stocked in total (-1 unlimited),
//	                       "s:<sku>" sold, kept for unlimited items only,
//	                       "m:<move id>" a move of units out of or into the
//	                       sale (see move.lua), kept while the sale lives,
//	                       "pay" the payment timeout in ms (absent: no
//	                       payment step, Sale.PaymentTimeout), "orders"
//	                       the number of order records (buy.lua, rebuild),
//	                       and saleTableField (below)
//	{p:s}:bought    hash   "<user>|<sku>" -> units the user holds
//	{p:s}:orders    hash   "<order group>" -> the group's orders, one
//	                       "<tail>|<order record>" a line, the tail the
//	                       id's last four characters ("<order id>|<order
//	                       record>" in values written before; record.go):
//	                       a group is the order ids of one buy.lua call
//	                       (orderGroup, idGroup), so a call writes one field;
//	                       or, stored before groups, "<order id>" -> record
//	{p:s}:idem      hash   "<user>|<idempotency key>" -> order id
//	{p:s}:tat:<w>:<n>  hash  "<user>" -> a buyer's throttle state
//	                       (BuyRequest.Throttle) that passes in the n-th
//	                       window of w ms; removed a window after it (see buy.lua)
//	{p:s}:ptoken:<token>   string  a purchase token an accepted buy spent
//	                       (BuyRequest.Token), kept while it can be presented
//	{p:s}:events    stream every stock movement, in order (see events.go)
//	{p:s}:deadlines zset   "<order id>" -> pay_by (unix ms, Redis's clock):
//	                       exactly the orders still awaiting payment (pay.go)
//	{p:s}:paid      hash   "<order id>" -> payment ref of a paid order
//	{p:s}:initlock  string owner token of the instance rebuilding the sale
//	{p:s}:op:<id>   string marks a restock or cancel call as applied, with the
//	                       remaining right after it, or a pause or resume
//	                       call that changed the sale (expires in a day)
//	{p:s}:stage:<token>:<name>  hashes being staged by a rebuild
//	{p:s}:archived  string the sale was archived (its keys removed) within
//	                       the last hour: no rebuild commits (archive.lua)
//
// One key is of no sale: Move's index of the moves under way
// (pending.go), under a hash tag no sale id can have ("" is no id):
//
//	{p:}:moves      zset   "<source sale>|<move id>" -> when Move noted it
//	                       (unix ms): a move whose second half may not
//	                       have run, until it is done
type saleKeys struct {
	sale, bought, orders, idem, events, initLock string
	deadlines, paid                              string // payment step (pay.go)
	tag                                          string
	throttle, token                              string // the starts of the keys
	live, roomCfg, buckets                       string // a waiting room's (CheckedBuy.WithGate)
}

// keySuffixes are the ends of saleKeys' keys, in the order keys builds
// them: every key is the tag followed by one of them.
var keySuffixes = [...]string{":sale", ":bought", ":orders", ":idem", ":events", ":initlock", ":deadlines", ":paid", ":tat:", ":ptoken:", ":room:live", ":room:cfg", ":room:b:"}

// keys builds every key of the sale in one allocation: the tag and each
// key are parts of one string.
func (e *Engine) keys(saleID string) saleKeys {
	tagLen := len(e.prefix) + len(saleID) + 3
	n := tagLen
	for _, s := range keySuffixes {
		n += tagLen + len(s)
	}
	var b strings.Builder
	b.Grow(n)
	writeTag := func() {
		b.WriteString("{")
		b.WriteString(e.prefix)
		b.WriteString(":")
		b.WriteString(saleID)
		b.WriteString("}")
	}
	writeTag()
	for _, s := range keySuffixes {
		writeTag()
		b.WriteString(s)
	}
	all := b.String()
	tag := all[:tagLen]
	var parts [len(keySuffixes)]string
	at := tagLen
	for i, s := range keySuffixes {
		parts[i] = all[at : at+tagLen+len(s)]
		at += tagLen + len(s)
	}
	return saleKeys{
		tag:       tag,
		sale:      parts[0],
		bought:    parts[1],
		orders:    parts[2],
		idem:      parts[3],
		events:    parts[4],
		initLock:  parts[5],
		deadlines: parts[6],
		paid:      parts[7],
		throttle:  parts[8],
		token:     parts[9],
		live:      parts[10],
		roomCfg:   parts[11],
		buckets:   parts[12],
	}
}

// buy returns buy.lua's KEYS (see buy.lua): a new slice, which the
// coalescer of the sale shares among all its calls (nobody writes it).
func (k saleKeys) buy() []string {
	return []string{k.sale, k.bought, k.orders, k.idem, k.events, k.throttle, k.token, k.deadlines, k.live, k.roomCfg, k.buckets}
}

// op returns the key marking a one-off operation (a restock, a cancel, a
// pause or resume call) as applied.
func (k saleKeys) op(id string) string { return k.tag + ":op:" + id }

// archived returns the keys archive.lua gets: the sale hash, its stream,
// the rebuild lock and the payment deadlines (its checks read them), the
// archived mark it sets, then every other key of the sale that lives as
// long as the sale. The keys that expire on their own (op:*, ptoken:*,
// tat:*, stage:*) are not among them: Engine.PurgeArchived finds them.
// "deadlines" (a zset) and "paid" (a hash) are the payment deadline's.
func (k saleKeys) archived() []string {
	return []string{k.sale, k.events, k.initLock, k.deadlines, k.archivedMark(), k.bought, k.orders, k.idem, k.paid}
}

// archivedMark is the mark archive.lua leaves when it removes the sale,
// for commit.lua to refuse a rebuild whose snapshot was read before (it
// expires after archivedMarkTTL).
func (k saleKeys) archivedMark() string { return k.tag + ":archived" }

// stage returns the staging key of one live hash during a rebuild.
func (k saleKeys) stage(token, name string) string {
	return k.tag + ":stage:" + token + ":" + name
}

// Key returns a key under the sale's hash tag for a caller's own per-sale
// data ("{<prefix>:<sale>}:<name>"), so it shares the sale's cluster slot.
// Names the engine uses itself: sale, bought, orders, idem, events,
// initlock, op:*, stage:*, tat:*, throttle:* (before the tat:* hashes),
// ptoken:*, deadlines, paid.
func (e *Engine) Key(saleID, name string) string { return e.keys(saleID).tag + ":" + name }

// pendingMovesKey is the index of pending moves (pending.go).
func (e *Engine) pendingMovesKey() string { return "{" + e.prefix + ":}:moves" }

// EventsKey is the Redis Stream holding the sale's stock movements, the
// queue an order consumer reads.
func (e *Engine) EventsKey(saleID string) string { return e.keys(saleID).events }

// Order ids are "<sale id>.<ULID>": the sale is recoverable from the id (so an
// order can be found and cancelled knowing only its id), the ULID sorts by
// creation time and carries 80 random bits.
const orderIDSep = "."

// NewOrderID makes a new order id of the sale.
func NewOrderID(saleID string) string {
	var text [ulid.EncodedSize]byte
	_ = ulid.Make().MarshalTextTo(text[:]) // fails only for a shorter dst
	var b strings.Builder                  // one allocation: the id itself
	b.Grow(len(saleID) + len(orderIDSep) + len(text))
	b.WriteString(saleID)
	b.WriteString(orderIDSep)
	b.Write(text[:])
	return b.String()
}

// idGroup hands out the order ids of one script call's buys: ids of one
// group (orderGroup), so that the call's orders are one field of the orders
// hash. The first id is NewOrderID's; the others differ from it in the last
// orderGroupTail characters only (still a ULID's, of the same millisecond),
// which count the call's buys.
type idGroup struct {
	prefix string
	n      int
}

// ulidDigits are the characters of a ULID (Crockford's base 32), by value.
const ulidDigits = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// next returns the call's next order id, of sale saleID.
func (g *idGroup) next(saleID string) string {
	if g.prefix == "" || g.n == 1<<(5*orderGroupTail) {
		id := NewOrderID(saleID)
		g.prefix, g.n = orderGroup(id), 0
	}
	var tail [orderGroupTail]byte
	for i, n := orderGroupTail-1, g.n; i >= 0; i, n = i-1, n>>5 {
		tail[i] = ulidDigits[n&31]
	}
	g.n++
	return g.prefix + string(tail[:])
}

// give gives bc, before it is first sent, the call's next order id if the
// engine chose its id (buyCall.ownID).
func (g *idGroup) give(bc *buyCall) {
	if bc.ownID {
		bc.placed.ID, bc.ownID = g.next(bc.placed.SaleID), false
	}
}

// SaleOfOrder returns the sale id an order id belongs to, or an error matching
// ErrInvalid if s is not an order id the engine could have made.
func SaleOfOrder(orderID string) (string, error) {
	i := strings.LastIndex(orderID, orderIDSep)
	if i < 0 {
		return "", invalid("order_id", "malformed")
	}
	sale, suffix := orderID[:i], orderID[i+1:]
	if !ValidID(sale) {
		return "", invalid("order_id", "malformed")
	}
	if _, err := ulid.ParseStrict(suffix); err != nil {
		return "", invalid("order_id", "malformed")
	}
	return sale, nil
}
