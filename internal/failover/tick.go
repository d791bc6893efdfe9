package failover

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/seckill/seckill/internal/store"
)

// Run ticks until ctx is done (Step every Config.Tick). It does nothing if
// the seller does not tick.
func (f *Seller) Run(ctx context.Context) {
	if !f.Ticks() {
		return
	}
	t := time.NewTicker(f.tick)
	defer t.Stop()
	for {
		f.Step(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Step is one tick: ping Redis, read the mode, heartbeat, hand over acks
// (and heartbeat again once handed over), and switch the mode when the
// rules say so.
func (f *Seller) Step(ctx context.Context) {
	now := time.Now()
	redisOK := f.pingRedis(ctx, max(f.tick/2, 100*time.Millisecond))
	f.mu.Lock()
	if redisOK {
		f.redisDown = time.Time{}
		if f.redisUp.IsZero() {
			f.redisUp = now
		}
	} else {
		f.redisUp = time.Time{}
		if f.redisDown.IsZero() {
			f.redisDown = now
		}
	}
	downFor, upFor := since(now, f.redisDown), since(now, f.redisUp)
	f.mu.Unlock()

	// The fleet's trusted Redis nodes first: a master checked before they
	// were known is held back (or let go) before the mode's first read.
	if !f.loadTrust(ctx) {
		return
	}
	m, err := f.db.SellMode(ctx)
	if err != nil {
		if ctx.Err() == nil {
			f.log.Warn("degraded mode: read the sell mode", "err", err)
		}
		return // keep the last mode known
	}
	f.set(m) // first: buys stop going to Redis before the hand-over
	// The heartbeat says when this instance was last alive: the time it is
	// written, not the tick's start, and before a hand-over that may wait a
	// tick for buys on their way to Redis. A heartbeat as old as the ping
	// and that wait (up to half a tick and a tick) would be older than the
	// grace by the next one, and the others would take this instance for
	// dead and sell from the database while its buy is still on its way
	// (TestStepHeartbeatsBeforeTheHandOverWaits).
	beat := store.Instance{Name: f.name, FlushedEpoch: f.flushedEpoch(), Consumer: f.consumer}
	if redisOK {
		beat.RedisOKAt = now
	}
	f.heartbeat(ctx, beat)
	switch flushed := f.flushedEpoch(); {
	case m.Mode != store.ModeRedis && flushed < m.Epoch:
		f.flush(ctx, m.Epoch, m.Mode == store.ModeRecovering)
		if beat.FlushedEpoch != f.flushedEpoch() {
			beat.FlushedEpoch = f.flushedEpoch()
			f.heartbeat(ctx, beat) // the others wait for this one
		}
	case m.Mode == store.ModeRedis && flushed > 0 && m.Epoch > flushed:
		// A recovery has ended since the last hand-over: the stream held
		// nothing more of the unsure buys handed over.
		f.acks.settle()
	}
	if m.Mode == store.ModeDB && f.fleetFlushed(ctx, m.Epoch, now) {
		f.mu.Lock()
		f.fleetEpoch = max(f.fleetEpoch, m.Epoch)
		f.mu.Unlock()
	}

	f.mu.Lock()
	restarted := f.restarted // let go by set if a recovery has run since the restart
	f.mu.Unlock()
	f.trustSeen(ctx)

	switch m.Mode {
	case store.ModeRedis:
		reason := ""
		switch {
		case restarted && redisOK:
			if next, ok := f.switchTo(ctx, m, store.ModeRecovering, now, time.Time{}, "redis restarted: it may have lost writes"); ok {
				f.Recover(ctx, next)
			}
			return
		case m.Setting == store.SettingForce:
			reason = "forced by an operator"
		case m.Setting == store.SettingAuto && !redisOK && downFor >= f.grace && !f.othersSeeRedis(ctx, now):
			reason = "no instance reached redis for " + f.grace.String()
		}
		if reason != "" {
			f.switchTo(ctx, m, store.ModeDB, now, now.Add(f.grace), reason)
		}
	case store.ModeDB:
		if redisOK && f.fencedFor() < m.Epoch {
			f.fenceAll(ctx, m.Epoch)
		}
		switch {
		case m.Setting == store.SettingOff:
			f.switchTo(ctx, m, store.ModeRecovering, now, time.Time{}, "degraded mode turned off by an operator")
		case m.Setting == store.SettingAuto && redisOK && upFor >= f.grace && f.fencedFor() >= m.Epoch:
			if next, ok := f.switchTo(ctx, m, store.ModeRecovering, now, time.Time{}, "redis is back"); ok {
				f.Recover(ctx, next)
			}
		}
	case store.ModeRecovering:
		switch {
		case m.Setting == store.SettingForce:
			f.switchTo(ctx, m, store.ModeDB, now, now.Add(f.grace), "forced by an operator")
		case redisOK && upFor >= f.grace:
			// Whoever began may have died: any instance finishes it (each
			// step is safe to repeat, the last switch happens once).
			f.Recover(ctx, m)
		}
	}
}

// Beat records this instance's heartbeat now, naming its order consumer,
// without a tick: for a process about to start its consumer, so that a
// consumer that dies holding entries was named by a heartbeat first (the
// others then take its entries over at once, not after the reclaim's idle
// time), while its first Step, which may wait for that consumer (a
// recovery waits for the streams to drain), runs once it reads.
func (f *Seller) Beat(ctx context.Context) {
	f.heartbeat(ctx, store.Instance{Name: f.name, FlushedEpoch: f.flushedEpoch(), Consumer: f.consumer})
}

// pingRedis reports whether Redis answers a PING within timeout. The tick
// does not wait longer, whatever the client does (go-redis enforces its own
// read timeout, not the context's deadline, unless told to): a tick held up
// would hold up this instance's heartbeat, and the others would take it for
// dead. A ping still unanswered from an earlier tick counts as no answer.
func (f *Seller) pingRedis(ctx context.Context, timeout time.Duration) bool {
	if !f.pinging.CompareAndSwap(false, true) {
		return false
	}
	done := make(chan bool, 1)
	go func() {
		defer f.pinging.Store(false)
		pctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		done <- f.ping(pctx) == nil
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

func (f *Seller) flushedEpoch() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.flushed
}

func (f *Seller) fencedFor() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fencedEpoch
}

// othersSeeRedis reports whether another instance reached Redis within the
// grace period (then Redis is up and this instance's trouble is its own:
// it answers 503 and its readiness check fails, and nothing switches).
func (f *Seller) othersSeeRedis(ctx context.Context, now time.Time) bool {
	ins, err := f.db.Instances(ctx, now.Add(-f.grace))
	if err != nil {
		return true // unsure: do not switch
	}
	for _, in := range ins {
		if in.Name != f.name && now.Sub(in.RedisOKAt) < f.grace {
			return true
		}
	}
	return false
}

func (f *Seller) switchTo(ctx context.Context, m store.SellMode, to string, now, sellsFrom time.Time, reason string) (store.SellMode, bool) {
	next, err := f.db.SwitchMode(ctx, m.Epoch, to, now, sellsFrom, reason)
	if err != nil {
		if !errors.Is(err, store.ErrModeChanged) && ctx.Err() == nil {
			f.log.Warn("degraded mode: switch", "to", to, "err", err)
		}
		return m, false
	}
	f.log.Warn("degraded mode: switched", "from", m.Mode, "to", to, "epoch", next.Epoch, "reason", reason)
	f.set(next)
	return next, true
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// heartbeat writes in, seen now.
func (f *Seller) heartbeat(ctx context.Context, in store.Instance) {
	in.SeenAt = time.Now()
	if err := f.db.Heartbeat(ctx, in); err != nil && ctx.Err() == nil {
		f.log.Warn("degraded mode: heartbeat", "err", err)
	}
}
