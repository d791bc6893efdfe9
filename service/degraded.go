package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/inventory"
	"github.com/seckill/seckill/store"
)

// Degraded mode: when no instance reaches Redis, the database sells.
//
// Who sells is one row in the database (store.SellMode), read by every
// instance each tick. The rules that keep a unit from being sold twice:
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
//     voided should its order come out of the stream (store.MarkUnsure).
//   - Every database buy checks, in its own transaction, that the mode and
//     epoch are still the ones it was routed by; a switch waits for the
//     buys under way.
//   - The first instance that reaches Redis again while the database sells
//     fences every sale off in Redis (Engine.Fence): an instance that has
//     not heard of degraded mode gets ErrFenced, never a sale of stale stock.
//   - Going back: the mode becomes recovering (nobody sells), every
//     instance hands over its acks again, the consumer drains what the
//     stream still holds, every sale's state in Redis is repaired from the
//     database (Engine.Repair) and unfenced, and only then does Redis sell
//     again. A Redis seen to restart (a new run_id on a new connection)
//     goes through the same recovery before it sells: it may have lost
//     writes the database or an instance's acks still have.
//
// The switch to db is automatic (setting auto) only when this instance has
// not reached Redis for the grace period and no other instance has either;
// force switches now; off never switches (Redis down: 503).
type degraded struct {
	s     *Service
	name  string
	tick  time.Duration
	grace time.Duration

	mu          sync.Mutex
	mode        store.SellMode
	known       bool      // mode has been read at least once
	redisDown   time.Time // since when the ping fails; zero while it answers
	redisUp     time.Time // since when it answers; zero while it fails
	flushed     int64     // the degraded epoch this instance handed its acks over for
	fleetEpoch  int64     // the degraded epoch every live instance has handed its acks over for
	fencedEpoch int64     // the degraded epoch this instance fenced Redis for

	// redisBuys counts this instance's buys on their way to Redis: a
	// hand-over waits for them, so that each one's order (or unknown
	// outcome) is in the acks it hands over.
	redisBuys atomic.Int64
	pinging   atomic.Bool // a tick's ping is under way

	// A Redis that restarted or failed over may have lost writes
	// (onConnect): restarted blocks this instance's Redis buys until a
	// recovery that began after restartEpoch has ended.
	cluster      bool
	runIDs       map[string]string // node id ("" standalone) -> run_id
	suspects     map[string]bool   // replication ids of promoted masters not yet repaired
	verified     map[string]bool   // ... and of the ones a recovery has repaired
	restarted    bool
	restartEpoch int64
	fromRedis    atomic.Bool // redisSells, kept by changed

	consumer string // this instance's order consumer

	acks ackRing
}

// consumerAlive tells the order consumer whether another consumer's
// process still runs: false once an instance with that consumer has not
// ticked for three grace periods, so that its pending entries are taken
// over at once instead of after the reclaim's idle time. Unknown consumers,
// or no answer from the database, count as alive (applying an entry twice
// is harmless; taking it needlessly is not worth a guess).
func (d *degraded) consumerAlive(ctx context.Context, consumer string) bool {
	if d.tick < 0 {
		return true // no heartbeats from this fleet
	}
	seen, ok, err := d.s.db.ConsumerSeen(ctx, consumer)
	return err != nil || !ok || time.Since(seen) < 3*d.grace
}

func newDegraded(s *Service) *degraded {
	host, _ := os.Hostname()
	d := &degraded{s: s, tick: s.cfg.DegradedTick, grace: s.cfg.DegradedGrace, cluster: len(s.cfg.RedisClusterAddrs) > 0,
		runIDs: map[string]string{}, suspects: map[string]bool{}, verified: map[string]bool{},
		name: fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randomHex(3))}
	switch {
	case d.tick <= 0 && d.grace > 0:
		d.tick = max(d.grace/3, 50*time.Millisecond)
	case d.tick <= 0:
		d.tick = time.Second
	}
	if d.grace <= 0 {
		d.grace = 3 * d.tick
	}
	d.fromRedis.Store(true)
	d.acks.size = s.cfg.AckRing
	if d.acks.size <= 0 {
		d.acks.size = 1 << 17
	}
	return d
}

// redisSells reports whether buys go to Redis: the mode is redis, or
// not known yet (degraded mode off for this instance, or the database
// never answered), and Redis is not held back after a restart. It is read
// by every buy: one atomic load.
func (d *degraded) redisSells() bool { return d.fromRedis.Load() }

// heldBack reports whether this instance holds Redis back after seeing it
// restart or fail over, until a recovery has repaired it.
func (d *degraded) heldBack() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.restarted
}

// redisUnreachable reports whether this instance's last ping of Redis went
// unanswered.
func (d *degraded) redisUnreachable() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.redisDown.IsZero()
}

// sells is the mode as of the last tick and whether Redis sells.
func (d *degraded) sells() (store.SellMode, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mode, d.fromRedis.Load()
}

// changed recomputes fromRedis; d.mu is held.
func (d *degraded) changed() {
	d.fromRedis.Store((!d.known || d.mode.Mode == store.ModeRedis) && !d.restarted)
}

// errRedisRestarted refuses a new connection to a Redis that restarted or
// failed over, until it has been repaired from the database.
var errRedisRestarted = errors.New("redis restarted or failed over: not used until it is repaired from the database")

// mayDial marks a context whose Redis calls may open connections while
// Redis is held back after a restart: the recovery's, the consumer's.
type mayDial struct{}

func allowedToDial(ctx context.Context) context.Context {
	return context.WithValue(ctx, mayDial{}, true)
}

// onConnect runs on every new connection to Redis (the client's
// OnConnect), before the connection is used. A Redis that restarted (a new
// run_id for a node seen before) or a master that was promoted from a
// replica (it has a previous replication id, and this one was never
// checked) may hold counters behind the orders the database already has:
// the rest of an AOF everysec window, a restore, a replica that was behind.
// Selling from them would sell those units again. So this instance stops
// buying from Redis at once — the connection is refused to everyone but
// the recovery and the consumer — and the next tick repairs Redis from the
// database (the recovery of degraded mode) before anyone sells from it.
func (d *degraded) onConnect(ctx context.Context, cn *redis.Conn) error {
	if d.tick < 0 {
		return nil // degraded mode off for this instance: nothing would recover
	}
	info, err := cn.Info(ctx, "server", "replication").Result()
	if err != nil {
		return nil // a server without INFO (miniredis's is partial): nothing to compare
	}
	runID, replID := infoField(info, "run_id"), infoField(info, "master_replid")
	promoted := infoField(info, "role") == "master" && infoField(info, "second_repl_offset") != "-1" && replID != ""
	node := ""
	if d.cluster {
		if node, err = cn.ClusterMyID(ctx).Result(); err != nil {
			return nil
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	why := ""
	if prev, ok := d.runIDs[node]; ok && prev != runID && runID != "" {
		why = "redis restarted (new run id)"
	}
	d.runIDs[node] = runID
	if promoted && !d.verified[replID] {
		why = "a redis replica was promoted to master"
		d.suspects[replID] = true
	}
	if why != "" && !d.restarted {
		d.restarted, d.restartEpoch = true, d.mode.Epoch
		d.changed()
		d.s.log.Warn("degraded mode: no buys from redis until it is repaired from the database", "why", why, "node", node)
	}
	if d.restarted && ctx.Value(mayDial{}) == nil {
		return errRedisRestarted
	}
	return nil
}

// infoField returns a field of an INFO reply ("" if absent).
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return v
		}
	}
	return ""
}

// dbSells returns the mode if this instance is to buy on the database now:
// the mode is db, its grace period is over, and this instance and every
// other one seen within the grace period have handed over their acks for
// it (an instance that stopped ticking is passed over once it has not been
// seen for a grace period).
func (d *degraded) dbSells() (store.SellMode, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := d.mode
	return m, m.Mode == store.ModeDB && d.flushed >= m.Epoch && d.fleetEpoch >= m.Epoch && !time.Now().Before(m.SellsFrom)
}

// beginRedisBuy reports whether a buy goes to Redis, and if so counts it
// on its way until endRedisBuy. Once a tick has stopped the buys to Redis
// (set), no new one begins, and a hand-over waits for those under way.
func (d *degraded) beginRedisBuy() bool {
	d.redisBuys.Add(1)
	if d.redisSells() {
		return true
	}
	d.redisBuys.Add(-1)
	return false
}

// endRedisBuy records how a buy sent to Redis ended: an order its buyer is
// told of (bought, or a replay) is an ack; a buy whose outcome is unknown
// (the request may have run in Redis, its reply lost) is kept as unsure,
// under the order id it was sent with. buy without an order id was never
// sent.
func (d *degraded) endRedisBuy(buy inventory.BuyRequest, rc inventory.Receipt, err error) {
	defer d.redisBuys.Add(-1)
	switch {
	case err == nil:
		d.acks.add(rc.Order)
	case buy.OrderID != "" && outcomeUnknown(err):
		d.acks.addUnsure(inventory.Order{ID: buy.OrderID, SaleID: buy.SaleID, UserID: buy.UserID, Status: inventory.OrderPending,
			Items: buy.Lines, IdempotencyKey: buy.IdempotencyKey, CreatedAt: time.Now().UTC()})
	}
}

// outcomeUnknown reports whether a buy that failed with err may have run in
// Redis all the same: any error but the engine's answers, which it gives
// only for a buy that made no order. Taking a buy for unsure when it is not
// costs nothing (its order never arrives); the reverse would sell twice.
func outcomeUnknown(err error) bool {
	for _, answer := range []error{inventory.ErrInvalid, inventory.ErrNotFound, inventory.ErrSoldOut, inventory.ErrLimitExceeded,
		inventory.ErrThrottled, inventory.ErrSaleNotActive, inventory.ErrFenced, inventory.ErrCorrupt, inventory.ErrIdempotencyMismatch,
		inventory.ErrTokenSpent} {
		if errors.Is(err, answer) {
			return false
		}
	}
	return true
}

// waitRedisBuys waits until no buy of this instance is on its way to
// Redis, for up to a tick (the heartbeat waits meanwhile), and reports
// whether none is.
func (d *degraded) waitRedisBuys(ctx context.Context) bool {
	deadline := time.Now().Add(d.tick)
	for d.redisBuys.Load() > 0 {
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(max(d.tick/20, time.Millisecond)):
		}
	}
	return true
}

func (d *degraded) set(m store.SellMode) {
	d.mu.Lock()
	d.mode, d.known = m, true
	d.changed()
	d.mu.Unlock()
	v := 0.0
	if m.Mode != store.ModeRedis {
		v = 1
	}
	d.s.metrics.degraded.Set(v)
}

func (d *degraded) run(ctx context.Context) {
	t := time.NewTicker(d.tick)
	defer t.Stop()
	for {
		d.step(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// step is one tick: ping Redis, read the mode, hand over acks, heartbeat,
// and switch the mode when the rules say so.
func (d *degraded) step(ctx context.Context) {
	now := time.Now()
	redisOK := d.ping(ctx, max(d.tick/2, 100*time.Millisecond))
	d.mu.Lock()
	if redisOK {
		d.redisDown = time.Time{}
		if d.redisUp.IsZero() {
			d.redisUp = now
		}
	} else {
		d.redisUp = time.Time{}
		if d.redisDown.IsZero() {
			d.redisDown = now
		}
	}
	downFor, upFor := since(now, d.redisDown), since(now, d.redisUp)
	d.mu.Unlock()

	m, err := d.s.db.SellMode(ctx)
	if err != nil {
		if ctx.Err() == nil {
			d.s.log.Warn("degraded mode: read the sell mode", "err", err)
		}
		return // keep the last mode known
	}
	d.set(m) // first: buys stop going to Redis before the hand-over
	switch flushed := d.flushedEpoch(); {
	case m.Mode != store.ModeRedis && flushed < m.Epoch:
		d.flush(ctx, m.Epoch)
	case m.Mode == store.ModeRedis && flushed > 0 && m.Epoch > flushed:
		// A recovery has ended since the last hand-over: the stream held
		// nothing more of the unsure buys handed over.
		d.acks.settle()
	}
	beat := store.Instance{Name: d.name, SeenAt: now, FlushedEpoch: d.flushedEpoch(), Consumer: d.consumer}
	if redisOK {
		beat.RedisOKAt = now
	}
	if err := d.s.db.Heartbeat(ctx, beat); err != nil && ctx.Err() == nil {
		d.s.log.Warn("degraded mode: heartbeat", "err", err)
	}
	if m.Mode == store.ModeDB && d.fleetFlushed(ctx, m.Epoch, now) {
		d.mu.Lock()
		d.fleetEpoch = max(d.fleetEpoch, m.Epoch)
		d.mu.Unlock()
	}

	d.mu.Lock()
	restarted := d.restarted
	if restarted && m.Mode == store.ModeRedis && m.Epoch > d.restartEpoch {
		d.restarted, restarted = false, false // a recovery has run since the restart
		d.changed()
		for id := range d.suspects {
			d.verified[id] = true
		}
		clear(d.suspects)
	}
	d.mu.Unlock()

	switch m.Mode {
	case store.ModeRedis:
		reason := ""
		switch {
		case restarted && redisOK:
			if next, ok := d.switchTo(ctx, m, store.ModeRecovering, now, time.Time{}, "redis restarted: it may have lost writes"); ok {
				d.recover(ctx, next)
			}
			return
		case m.Setting == store.SettingForce:
			reason = "forced by an operator"
		case m.Setting == store.SettingAuto && !redisOK && downFor >= d.grace && !d.othersSeeRedis(ctx, now):
			reason = "no instance reached redis for " + d.grace.String()
		}
		if reason != "" {
			d.switchTo(ctx, m, store.ModeDB, now, now.Add(d.grace), reason)
		}
	case store.ModeDB:
		if redisOK && d.fencedFor() < m.Epoch {
			d.fenceAll(ctx, m.Epoch)
		}
		switch {
		case m.Setting == store.SettingOff:
			d.switchTo(ctx, m, store.ModeRecovering, now, time.Time{}, "degraded mode turned off by an operator")
		case m.Setting == store.SettingAuto && redisOK && upFor >= d.grace && d.fencedFor() >= m.Epoch:
			if next, ok := d.switchTo(ctx, m, store.ModeRecovering, now, time.Time{}, "redis is back"); ok {
				d.recover(ctx, next)
			}
		}
	case store.ModeRecovering:
		switch {
		case m.Setting == store.SettingForce:
			d.switchTo(ctx, m, store.ModeDB, now, now.Add(d.grace), "forced by an operator")
		case redisOK && upFor >= d.grace:
			// Whoever began may have died: any instance finishes it (each
			// step is safe to repeat, the last switch happens once).
			d.recover(ctx, m)
		}
	}
}

// ping reports whether Redis answers a PING within timeout. The tick does
// not wait longer, whatever the client does (go-redis enforces its own read
// timeout, not the context's deadline, unless told to): a tick held up
// would hold up this instance's heartbeat, and the others would take it for
// dead. A ping still unanswered from an earlier tick counts as no answer.
func (d *degraded) ping(ctx context.Context, timeout time.Duration) bool {
	if !d.pinging.CompareAndSwap(false, true) {
		return false
	}
	done := make(chan bool, 1)
	go func() {
		defer d.pinging.Store(false)
		pctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		done <- d.s.probe.Ping(pctx).Err() == nil // its own connection: a busy API pool is not an unreachable Redis
	}()
	select {
	case ok := <-done:
		return ok
	case <-time.After(timeout):
		return false
	}
}

func since(now, t time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return now.Sub(t)
}

func (d *degraded) flushedEpoch() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.flushed
}

func (d *degraded) fencedFor() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fencedEpoch
}

// othersSeeRedis reports whether another instance reached Redis within the
// grace period (then Redis is up and this instance's trouble is its own:
// it answers 503 and its readiness check fails, and nothing switches).
func (d *degraded) othersSeeRedis(ctx context.Context, now time.Time) bool {
	ins, err := d.s.db.Instances(ctx, now.Add(-d.grace))
	if err != nil {
		return true // unsure: do not switch
	}
	for _, in := range ins {
		if in.Name != d.name && now.Sub(in.RedisOKAt) < d.grace {
			return true
		}
	}
	return false
}

func (d *degraded) switchTo(ctx context.Context, m store.SellMode, to string, now, sellsFrom time.Time, reason string) (store.SellMode, bool) {
	next, err := d.s.db.SwitchMode(ctx, m.Epoch, to, now, sellsFrom, reason)
	if err != nil {
		if !errors.Is(err, store.ErrModeChanged) && ctx.Err() == nil {
			d.s.log.Warn("degraded mode: switch", "to", to, "err", err)
		}
		return m, false
	}
	d.s.log.Warn("degraded mode: switched", "from", m.Mode, "to", to, "epoch", next.Epoch, "reason", reason)
	d.set(next)
	return next, true
}
