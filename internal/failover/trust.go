package failover

import (
	"context"
	"maps"
	"time"

	"github.com/seckill/seckill/internal/store"
)

// The fleet's memory of its Redis nodes. What one process remembers of a
// node (the run_id it saw, the promoted masters a recovery repaired) dies
// with it: a process started after Redis restarted with counters behind the
// database (the last second of an AOF everysec lost with its host, a
// restore from an older RDB), or after a master was promoted while every
// instance died with the old one, would have nothing to compare with, and
// would sell units the database already has orders for. So the run_id and
// master_replid of each node are kept in the database (store.TrustRedis)
// once trusted: seen by an instance that does not hold Redis back, or by
// one whose hold a recovery has just lifted (the recovery made every
// master agree with the database). Every instance, a fresh one too,
// compares each master it connects to with them (check):
//
//   - a run_id other than the trusted one: the node restarted since;
//   - a promoted master (it has a previous replication id) whose
//     master_replid is not the trusted one: it took over since.
//
// No row for a node: its run_id is compared with nothing (the first deploy
// of this check, a new node); a promoted master without one is suspect (a
// Cluster replica that took over has a node id never trusted as a master).
// The trusted rows are read at every tick, before the mode; connections
// checked before the first read (the service connects Redis before it
// opens the database) are checked against them then (loadTrust).

// seenNode is a master as this instance last checked it.
type seenNode struct {
	store.RedisNode
	promoted bool
	dirty    bool // seen since this instance last wrote the node as trusted
}

// distrust tells why the fleet's trust does not vouch for n, if it does
// not: firm is false for a promoted master checked before the trusted
// nodes were loaded (their first load may vouch for it). f.mu is held.
func (f *Seller) distrust(n seenNode) (why string, firm bool) {
	t, ok := f.trusted[n.Node]
	if f.trustLoaded && ok && n.RunID != "" && t.RunID != n.RunID {
		return "redis restarted since the fleet last trusted it (new run id)", true
	}
	if !n.promoted || f.verified[n.ReplID] {
		return "", false
	}
	if f.trustLoaded && ok && t.ReplID == n.ReplID {
		f.verified[n.ReplID] = true // vouched for by the fleet
		return "", false
	}
	f.suspects[n.ReplID] = true
	return "a redis replica was promoted to master", f.trustLoaded
}

// suspect holds Redis back for why (if not ""), seen on node. renewed: the
// node has changed since this instance last checked it (a new run id, a
// promoted master not suspected before). f.mu is held.
func (f *Seller) suspect(why, node string, firm, renewed bool) {
	if why == "" {
		return
	}
	f.firm = f.firm || firm
	if f.restarted {
		if renewed && f.known && !f.epochPending {
			// Changed again while held: only a recovery that begins after
			// this repairs it (TestRestartSeenAsARecoveryEndsIsNotVouchedFor).
			f.restartEpoch = max(f.restartEpoch, repairedAfter(f.mode))
		}
		return
	}
	f.restarted = true
	if f.restartEpoch, f.epochPending = repairedAfter(f.mode), !f.known; f.epochPending {
		f.restartEpoch = 0 // set by the first mode read (set)
	}
	f.changed()
	f.log.Warn("degraded mode: no buys from redis until it is repaired from the database", "why", why, "node", node)
}

// release lets go of Redis held back once the mode says a recovery that
// began after the hold's reason was seen has ended (redis, past
// restartEpoch): that recovery made every master agree with the database,
// so the masters this instance saw are trusted (vouch), and the promoted
// ones it suspected are verified. It runs on every mode this instance
// learns (set): its tick's read, and its own recovery's switch to redis,
// so that an instance that repaired Redis sells from it at once rather
// than a tick later. A node seen to change after the mode it last learned
// moved restartEpoch past it (suspect), so no mode read earlier releases
// it. And this instance must have learned that recovery (a recovering
// epoch past restartEpoch, learned after the reason was seen: restartEpoch
// is at least every recovering epoch learned before): the mode it last
// learned may be older than the reason by a whole recovery if it did not
// tick meanwhile (its heartbeat too old for the recovery to wait for its
// hand-over), and that recovery may have repaired the node before it
// changed (TestRestartSeenByAnInstancePassedOverIsNotVouchedFor). A live
// instance learns every recovery: the recovery waits for its hand-over,
// which follows its read of the recovering mode. f.mu is held.
func (f *Seller) release() {
	if !f.restarted || f.mode.Mode != store.ModeRedis || f.mode.Epoch <= f.restartEpoch || f.recovering <= f.restartEpoch {
		return
	}
	f.restarted = false
	for id := range f.suspects {
		f.verified[id] = true
	}
	clear(f.suspects)
	f.vouch()
	f.log.Info("degraded mode: redis repaired from the database; selling from it again", "epoch", f.mode.Epoch)
}

// repairedAfter is the epoch after which a recovery that ends has begun
// after m was read: m's, or past the end of the recovery m is (it may have
// repaired a node before the node changed, and its end would lift the hold
// and vouch for the node unrepaired).
func repairedAfter(m store.SellMode) int64 {
	if m.Mode == store.ModeRecovering {
		return m.Epoch + 1
	}
	return m.Epoch
}

// loadTrust reads the fleet's trusted nodes (each tick). The first time,
// it checks against them every master this instance checked before: a
// restart since the fleet trusted the node holds Redis back; a promoted
// master held back only because nothing was known yet is let go if the
// fleet trusts its replication id. It reports false if they were never
// read (the caller does not go on without them).
func (f *Seller) loadTrust(ctx context.Context) bool {
	trusted, err := f.db.TrustedRedis(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			f.log.Warn("degraded mode: read the trusted redis nodes", "err", err)
		}
		return f.trustLoaded
	}
	first := !f.trustLoaded
	f.stored, f.trusted, f.trustLoaded = trusted, maps.Clone(trusted), true
	if !first {
		return true
	}
	held, firm := f.restarted, f.firm
	clear(f.suspects) // promoted masters suspected for want of the trusted ids
	for _, n := range f.seen {
		if why, _ := f.distrust(n); why != "" {
			f.suspect(why, n.Node, true, false)
			firm = true
		}
	}
	if held && !firm {
		f.restarted, f.epochPending = false, false
		f.changed()
		f.log.Info("degraded mode: the promoted redis is one the fleet trusts; selling from it")
	}
	return true
}

// vouch makes every master this instance saw trusted, as a recovery that
// has just ended leaves them; trustSeen writes them. f.mu is held.
func (f *Seller) vouch() {
	f.firm = false
	f.trusted = maps.Clone(f.trusted)
	if f.trusted == nil {
		f.trusted = map[string]store.RedisNode{}
	}
	for id, n := range f.seen {
		f.trusted[id] = n.RedisNode
		n.dirty = true
		f.seen[id] = n
	}
}

// trustSeen writes as trusted the masters this instance saw since it last
// did, and that the database does not have as trusted already, unless it
// holds Redis back. f.mu is not held.
func (f *Seller) trustSeen(ctx context.Context) {
	f.mu.Lock()
	if f.restarted || !f.trustLoaded {
		f.mu.Unlock()
		return
	}
	var nodes []store.RedisNode
	for id, n := range f.seen {
		if t, ok := f.stored[id]; n.dirty && (!ok || t != n.RedisNode) {
			nodes = append(nodes, n.RedisNode)
		}
	}
	f.mu.Unlock()
	if len(nodes) > 0 {
		if err := f.db.TrustRedis(ctx, nodes, f.name, time.Now()); err != nil {
			if ctx.Err() == nil {
				f.log.Warn("degraded mode: record the trusted redis nodes", "err", err)
			}
			return
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(nodes) > 0 {
		f.stored, f.trusted = maps.Clone(f.stored), maps.Clone(f.trusted)
		for _, n := range nodes {
			f.stored[n.Node], f.trusted[n.Node] = n, n
		}
	}
	for id, n := range f.seen { // unless seen otherwise meanwhile
		if t, ok := f.stored[id]; n.dirty && ok && t == n.RedisNode {
			n.dirty = false
			f.seen[id] = n
		}
	}
}
