// Package failover decides who sells — Redis, the database, or nobody — and
// runs the hand-over between them: it probes Redis, reads and switches the
// one sell-mode row every instance obeys, fences Redis off while the
// database sells, hands the database the orders this instance acknowledged
// from Redis (and the buys whose outcome it never learned), and repairs
// Redis from the database before it sells again. The service calls one Buy,
// one Cancel and one Pause, and asks it who sells for /readyz and metrics.
//
// It talks to the engine and to the store through the small interfaces it
// declares (Engine, Store, Streams, and Segments, which names the engine
// sale a buy of a segmented sale is made in), with the domain's types (inventory)
// and the store's sell-mode row (store.SellMode); it never imports the
// service.
//
// The rules that keep a unit from being sold twice:
//
//   - The database starts selling only when the mode says db, and only
//     from sells_from: a grace period after the switch in which every
//     instance learns of it (and stops sending buys to Redis) on its next
//     tick, and hands the database the orders it acknowledged from Redis
//     lately (its ring of acks), so that orders still on their way through
//     the stream are counted before the database sells what is left.
//   - The hand-over comes after this instance has stopped sending buys to
//     Redis and those on their way have ended, and the database sells only
//     once every live instance has handed over. A buy whose outcome is
//     unknown (its replies lost) is handed over as unsure: not counted, and
//     voided should its order come out of the stream (store.MarkUnsure),
//     unless an instance acknowledged it (a replay of its key): an
//     acknowledged hand-over wins, whatever order they come in.
//   - Every database buy checks, in its own transaction, that the mode and
//     epoch are still the ones it was routed by; a switch waits for the
//     buys under way.
//   - The first instance that reaches Redis again while the database sells
//     fences every sale off in Redis (Engine.Fence): an instance that has
//     not heard of degraded mode gets ErrFenced, never a sale of stale stock.
//   - Going back: the mode becomes recovering (nobody sells), every
//     instance hands over its acks again (after its order consumer's round
//     under way has written what it read: Parts.Rounds), the consumer drains what the
//     stream still holds, every sale's state in Redis is repaired from the
//     database (Engine.Repair) and unfenced, and only then does Redis sell
//     again. A Redis seen to restart (a new run_id on a new connection)
//     goes through the same recovery before it sells: it may have lost
//     writes the database or an instance's acks still have.
//
// The switch to db is automatic (setting auto) only when this instance has
// not reached Redis for the grace period and no other instance has either;
// force switches now; off never switches (Redis down: 503).
package failover
