package inventory

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Loader reads a sale from the system of record (the database) so the
// engine can rebuild it when its keys are missing from Redis.
type Loader interface {
	// LoadSale returns the sale and every order of it the system of record
	// holds. It returns an error matching ErrNotFound for an unknown sale.
	LoadSale(ctx context.Context, saleID string) (Snapshot, error)
}

// LoaderFunc adapts a function to Loader.
type LoaderFunc func(ctx context.Context, saleID string) (Snapshot, error)

// LoadSale returns f(ctx, saleID).
func (f LoaderFunc) LoadSale(ctx context.Context, saleID string) (Snapshot, error) {
	return f(ctx, saleID)
}

// EventsIgnored as Snapshot.EventsApplied tells the engine not to compare
// the snapshot with the sale's event stream (see Snapshot).
const EventsIgnored = "+"

// Snapshot is a sale as the system of record knows it.
type Snapshot struct {
	// Sale is the definition; Items[i].Stock is every unit ever stocked
	// (initial plus restocks), or Unlimited.
	Sale Sale
	// Orders are all orders of the sale. Pending and confirmed orders count
	// as sold and toward their buyer's limit; cancelled ones do not, but are
	// kept so a repeated cancel or idempotency key still finds them.
	Orders []Order
	// EventsApplied is the id of the newest event of the sale's stream that
	// Orders reflect: every event up to it is in the snapshot ("" if none).
	// If the stream has generated a newer event (whether or not the order
	// consumer has trimmed it since), some accepted orders are not in the
	// snapshot; rebuilding now would sell their units again, so the engine
	// waits and loads again instead. Read the position before reading the
	// system of record.
	// EventsIgnored skips the check, for a system of record that is not fed
	// from the stream.
	EventsApplied string
	// NewestEvent is the id of the newest event of the sale's stream the
	// system of record has seen ("" for none). The rebuilt sale's stream
	// never hands out an id at or below it: were the stream lost with
	// Redis and generated again on a server whose clock is behind the old
	// ids, new events would take ids the system of record already holds,
	// and one that tells events apart by id would skip them as applied.
	NewestEvent string
	// Moves are the sale's records of moves of units out of it and into it
	// (Engine.Move) that the system of record holds. A rebuilt sale gets
	// them back, so that a move that reached it is not applied again and a
	// move out of it that never arrived can still be finished
	// (FinishMoves): set Arrived on a move out once the other sale has
	// applied its in half.
	Moves []Move
	// SpentTokens are the single-use tokens the sale's orders spent
	// (Event.Spent) whose life is not over: a rebuilt or repaired sale
	// refuses them as its buys did (ErrTokenSpent). Those whose life is
	// over may be left out; they are not restored.
	SpentTokens []SpentToken
}

// rebuild makes a missing sale live again from the Loader. Several instances
// may race here; the lock keeps all but one from loading (a stampede on the
// database), and commit.lua keeps a slow loser from replacing the winner's
// live sale, so correctness does not depend on the lock.
func (e *Engine) rebuild(ctx context.Context, saleID string) error {
	if e.loader == nil {
		return &NotFoundError{Kind: "sale", IDs: []string{saleID}}
	}
	k := e.keys(saleID)
	token := newToken()
	deadline := time.Now().Add(e.waitFor)
	wait := 5 * time.Millisecond
	for {
		reply, err := e.run.run(ctx, initLockScript, []string{k.sale, k.initLock}, token, e.lockTTL.Milliseconds())
		if err != nil {
			return err
		}
		switch code(reply) {
		case codeReplay: // live already
			return nil
		case codeOK: // ours: load and commit
			done, err := e.loadAndCommit(ctx, saleID, k, token)
			if err != nil || done {
				if err != nil {
					_, _ = e.run.run(context.WithoutCancel(ctx), unlockScript, []string{k.initLock}, token)
				}
				return err
			}
		case codeLocked: // someone else is loading: wait for them
		default:
			return unexpected(initLockScript, reply)
		}
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("%w: sale %s is being rebuilt or has orders in flight; retry", ErrUnavailable, saleID)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// loadAndCommit loads the snapshot, stages it under keys only this rebuild
// knows, and commits it. done is false when the commit found orders in
// flight (or its staging expired): the caller waits and tries again.
func (e *Engine) loadAndCommit(ctx context.Context, saleID string, k saleKeys, token string) (done bool, err error) {
	snap, err := e.loader.LoadSale(ctx, saleID)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return false, &NotFoundError{Kind: "sale", IDs: []string{saleID}}
		}
		return false, fmt.Errorf("seckill: load sale %s: %w", saleID, err)
	}
	state, err := stateOf(saleID, snap)
	if err != nil {
		return false, err
	}
	if snap.NewestEvent != "" && !isEventID(snap.NewestEvent) {
		return false, fmt.Errorf("%w: snapshot of sale %s: newest event id %q", ErrCorrupt, saleID, snap.NewestEvent)
	}
	stageKeys := [7]string{k.stage(token, "sale"), k.stage(token, "bought"), k.stage(token, "orders"), k.stage(token, "idem"),
		k.stage(token, "deadlines"), k.stage(token, "paid"), k.stage(token, "spent")}
	ttl := max(2*e.lockTTL, time.Minute).Milliseconds()
	var calls []call
	// (the sale with saleTableField, which a repair does not compare)
	sale := append(slices.Clip(state.sale), saleTableField, saleTableValue)
	for i, fields := range [7][]any{sale, state.bought, state.orderGroups(), state.idem, state.deadlines, state.paid, state.spentFields()} {
		for len(fields) > 0 {
			n := min(len(fields), 2*stageChunk)
			calls = append(calls, call{s: stageScript, keys: []string{stageKeys[i]}, args: append([]any{ttl}, fields[:n]...)})
			fields = fields[n:]
		}
	}
	for _, r := range e.run.runPipelined(ctx, calls) {
		if r.err != nil {
			return false, r.err
		}
	}
	reply, err := e.run.run(ctx, commitScript,
		[]string{k.sale, k.bought, k.orders, k.idem, k.events, k.initLock, stageKeys[0], stageKeys[1], stageKeys[2], stageKeys[3],
			k.deadlines, k.paid, stageKeys[4], stageKeys[5], k.archivedMark(), stageKeys[6], k.token},
		token, snap.EventsApplied, snap.NewestEvent, len(state.spent), e.scriptNow())
	if err != nil {
		return false, err
	}
	switch code(reply) {
	case codeOK:
		e.notePendingOf(ctx, saleID, snap.Moves)
		return true, nil
	case codeReplay:
		return true, nil
	case codeInFlight, codeStageGone:
		return false, nil
	case codeArchived:
		return false, &ArchivedError{SaleID: saleID}
	}
	return false, unexpected(commitScript, reply)
}

// stageChunk is how many fields one stage.lua call writes.
const stageChunk = 500

// saleState is a snapshot as the field/value pairs of the four live hashes,
// and of the payment step: the deadlines (order id, pay_by ms; a zset once
// live) and the paid hash. Its orders are order id, record pairs; the
// orders hash holds them by group (orderGroups). spent are the marks of the
// spent tokens (spent.go).
type saleState struct {
	sale, bought, orders, idem []any
	deadlines, paid            []any
	spent                      []SpentToken
}

// orderGroups is the orders hash's field/value pairs: each group of the
// orders, and its orders (record.go).
func (st saleState) orderGroups() []any {
	byID := make(map[string]string, len(st.orders)/2)
	for i := 0; i+1 < len(st.orders); i += 2 {
		byID[st.orders[i].(string)] = st.orders[i+1].(string)
	}
	groups := groupValues(byID)
	out := make([]any, 0, 2*len(groups))
	for _, g := range slices.Sorted(maps.Keys(groups)) {
		out = append(out, g, groups[g])
	}
	return out
}

// stateOf checks a snapshot and turns it into hash fields: remaining is
// stocked minus what live orders hold; per-user counts are summed from live
// orders. A snapshot that sold more than it stocked leaves 0 remaining:
// never sell what is not there.
func stateOf(saleID string, snap Snapshot) (saleState, error) {
	s := snap.Sale
	bad := func(format string, args ...any) (saleState, error) {
		return saleState{}, fmt.Errorf("%w: snapshot of sale %s: %s", ErrCorrupt, saleID, fmt.Sprintf(format, args...))
	}
	if s.ID != saleID {
		return bad("has id %q", s.ID)
	}
	if err := validateSnapshotSale(s); err != nil {
		return bad("%v", err)
	}
	sold := make(map[string]int64, len(s.Items))
	for _, it := range s.Items {
		sold[it.SKU] = 0
	}
	held := map[string]int64{}
	awaiting := map[string]int64{} // units of orders awaiting payment, by sku
	keyed := map[string][]Order{}  // "<user>|<key>" -> its orders
	var keys []string
	st := saleState{}
	for _, o := range snap.Orders {
		if o.SaleID != saleID {
			return bad("order %s is of sale %q", o.ID, o.SaleID)
		}
		if got, err := SaleOfOrder(o.ID); err != nil || got != saleID {
			return bad("order id %q", o.ID)
		}
		if err := validateID("user", o.UserID); err != nil {
			return bad("order %s: %v", o.ID, err)
		}
		if err := validateLines(o.Items); err != nil {
			return bad("order %s: %v", o.ID, err)
		}
		if validateIdempotencyKey(o.IdempotencyKey) != nil {
			return bad("order %s: idempotency key", o.ID)
		}
		for _, l := range o.Items {
			if _, ok := sold[l.SKU]; !ok {
				return bad("order %s has unknown sku %s", o.ID, l.SKU)
			}
			if o.Status != OrderCancelled {
				sold[l.SKU] += l.Qty
				held[o.UserID+"|"+l.SKU] += l.Qty
			}
		}
		st.orders = append(st.orders, o.ID, encodeRecord(o))
		if s.PaymentTimeout > 0 {
			st.addPayment(o, s.PaymentTimeout, awaiting)
		}
		if k := o.UserID + "|" + o.IdempotencyKey; o.IdempotencyKey != "" {
			if keyed[k] == nil {
				keys = append(keys, k)
			}
			keyed[k] = append(keyed[k], o)
		}
	}
	for _, k := range keys {
		st.idem = append(st.idem, k, keyed[k][KeyedOrder(keyed[k])].ID)
	}
	st.sale = append(st.sale, "limit", limitOf(s), "start", unixMs(s.StartsAt), "end", unixMs(s.EndsAt),
		"paused", flag(s.Paused), "items", formatItems(s.Items), "orders", len(st.orders)/2)
	if s.PaymentTimeout > 0 {
		st.sale = append(st.sale, "pay", s.PaymentTimeout.Milliseconds())
	}
	for _, it := range s.Items {
		if it.Stock == Unlimited {
			st.sale = append(st.sale, "r:"+it.SKU, Unlimited, "t:"+it.SKU, Unlimited, "s:"+it.SKU, sold[it.SKU])
			continue
		}
		st.sale = append(st.sale, "r:"+it.SKU, max(it.Stock-sold[it.SKU], 0), "t:"+it.SKU, it.Stock)
	}
	if s.PaymentTimeout > 0 {
		for _, it := range s.Items { // every item's, 0 included, so that a repair sets them all
			st.sale = append(st.sale, "a:"+it.SKU, awaiting[it.SKU])
		}
	}
	for f, q := range held {
		st.bought = append(st.bought, f, q)
	}
	for _, t := range snap.SpentTokens {
		if err := validSpent(t); err != nil {
			return bad("spent token: %v", err)
		}
		st.spent = append(st.spent, t)
	}
	for _, m := range snap.Moves {
		if m.ID == "" || strings.Contains(m.ID, "|") || len(m.ID) > 64 || m.Units == 0 {
			return bad("move %q", m.ID)
		}
		if _, err := decodeMove(m.ID, m.encode()); err != nil {
			return bad("%v", err)
		}
		st.sale = append(st.sale, movePrefix+m.ID, m.encode())
	}
	return st, nil
}

// validateSnapshotSale is ValidateSale, except that an item's stock may have
// grown past MaxQty through restocks.
func validateSnapshotSale(s Sale) error {
	items := make([]Item, len(s.Items))
	for i, it := range s.Items {
		if it.Stock > maxStocked {
			return invalid("items["+strconv.Itoa(i)+"].stock", "more than %d", int64(maxStocked))
		}
		items[i] = Item{SKU: it.SKU, Stock: min(it.Stock, MaxQty)}
	}
	s.Items = items
	return ValidateSale(s)
}

// isEventID: id is a stream entry id as Redis generates them, "<ms>-<seq>"
// with both parts in uint64 and not 0-0.
func isEventID(id string) bool {
	ms, seq, ok := strings.Cut(id, "-")
	m, err1 := strconv.ParseUint(ms, 10, 64)
	n, err2 := strconv.ParseUint(seq, 10, 64)
	return ok && err1 == nil && err2 == nil && (m > 0 || n > 0) && ms == strconv.FormatUint(m, 10) && seq == strconv.FormatUint(n, 10)
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
