package failover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/store"
)

// Engine is what the seller asks of the Redis engine (*inventory.Engine).
type Engine interface {
	BuyChecked(ctx context.Context, b inventory.CheckedBuy) (inventory.Receipt, error)
	Cancel(ctx context.Context, orderID, userID string) (inventory.Receipt, error)
	Pause(ctx context.Context, saleID string) error
	Resume(ctx context.Context, saleID string) error
	Fence(ctx context.Context, saleID string, epoch int64) (bool, error)
	Unfence(ctx context.Context, saleID string, epoch int64) error
	LiftStaleFence(ctx context.Context, saleID string, epoch int64) (bool, error)
	Repair(ctx context.Context, saleID string, from inventory.Loader) (inventory.Repaired, error)
}

// Store is what the seller asks of the database (*store.Store): the sell
// mode and the instances' heartbeats, the hand-over of acknowledged and
// unsure orders, and selling, cancelling and pausing while it sells.
type Store interface {
	SellMode(ctx context.Context) (store.SellMode, error)
	SwitchMode(ctx context.Context, epoch int64, to string, now, sellsFrom time.Time, reason string) (store.SellMode, error)
	Heartbeat(ctx context.Context, in store.Instance) error
	ConsumerSeen(ctx context.Context, consumer string) (last time.Time, ok bool, err error)
	Instances(ctx context.Context, since time.Time) ([]store.Instance, error)
	AdoptOrders(ctx context.Context, orders []inventory.Order) error
	AdoptSpentTokens(ctx context.Context, tokens []inventory.SpentToken) error
	MarkUnsure(ctx context.Context, orders []inventory.Order) error
	AdoptMoves(ctx context.Context, moves, unsure []inventory.MoveHalf) error
	SettleUnsure(ctx context.Context, saleID string) error
	SaleIDs(ctx context.Context) ([]string, error)
	Snapshot(ctx context.Context, saleID string) (inventory.Snapshot, error)
	JournalRepair(ctx context.Context, r inventory.Repaired, reason string, at time.Time) error
	TrustedRedis(ctx context.Context) (map[string]store.RedisNode, error)
	TrustRedis(ctx context.Context, nodes []store.RedisNode, by string, now time.Time) error
	Buy(ctx context.Context, b store.DegradedBuy) (inventory.Receipt, error)
	Cancel(ctx context.Context, epoch int64, orderID, user string, now time.Time) (inventory.Receipt, error)
	SetPaused(ctx context.Context, epoch int64, saleID string, paused bool, now time.Time) error
}

// Streams tells which of a sale's events are still on their way from its
// Redis stream to the database (pipeline.InFlight).
type Streams interface {
	InFlight(ctx context.Context, saleID string) ([]inventory.Event, error)
}

// Config tunes a Seller. Zero values mean the defaults.
type Config struct {
	// Tick is how often the seller pings Redis and reads who sells
	// (default 1s; a third of Grace when only Grace is set). Negative: the
	// seller never ticks (Redis always sells; no hand-over, no recovery).
	Tick time.Duration
	// Grace is how long Redis must be unreachable from every instance
	// before the database sells, how long after that switch the database
	// begins, and how long Redis must answer again before it is repaired
	// and sells again (default 3 ticks).
	Grace time.Duration
	// AckRing is how many of its latest acknowledged orders the seller
	// keeps to hand to the database (default 131072).
	AckRing int
	// Cluster: Redis is a Cluster (restarts are told apart per node).
	Cluster bool
	// Recheck is how long a node's check (NodeHook) holds before the next
	// command on it checks it again (default Tick).
	Recheck time.Duration
	Logger  *slog.Logger

	// OnMode, if set, is told every mode the seller reads or sets.
	OnMode func(store.SellMode)
	// Observe, if set, is told how each buy ended that Redis or the
	// database answered (db: the database), and how long it took; not a
	// buy refused before (nobody sells, a throttled buyer).
	Observe func(err error, took time.Duration, db bool)
	// BeforeDatabaseBuy, if set, is asked before every database buy: the
	// checks buy.lua makes itself for a buy from Redis (the buyer's rate
	// limit); its error refuses the buy.
	BeforeDatabaseBuy func(ctx context.Context, b inventory.CheckedBuy) error
	// Appended, if set, is told of a sale whose stream a cancel from Redis
	// appended to (the order consumer may have drained it).
	Appended func(saleID string)
	// Bought, if set, is told of the sale (the segment, of a segmented
	// one) whose stream a buy from Redis appended a new order to (not a
	// replay's): the order consumer reads it in its next round, and the
	// service's background loops know it moved lately.
	Bought func(saleID string)
}

// Parts are what the seller works with; see Wire.
type Parts struct {
	Engine  Engine
	Store   Store
	Streams Streams
	// Ping pings Redis on a connection of its own: a busy pool is not an
	// unreachable Redis.
	Ping func(ctx context.Context) error
	// Consumer is this instance's order consumer (named in heartbeats).
	Consumer string
	// Rounds, if set, waits until the rounds of this instance's order
	// consumer under way when it is called have ended
	// (pipeline.Consumer.WaitRounds). A recovery's hand-over waits for it: a batch
	// the consumer read from a Redis that then lost it (a failover, a
	// restart) is in no stream the recovery waits on, so its write (a
	// restock, one half of a move) must land before the repair reads the
	// database, or Redis keeps units the database no longer counts.
	Rounds func(ctx context.Context) error
	// Segments, if set, tells the engine sale a buy of a segmented sale is
	// made in (segments.go); Engine then takes the segmented sale's id for
	// its buys, pauses and stale fences (segment.Router).
	Segments Segments
}

// Seller sells each buy where it may be sold now, and keeps who sells up to
// date (Run). Create it with New, give it its parts with Wire.
type Seller struct {
	cfg     Config
	log     *slog.Logger
	name    string
	off     bool // Config.Tick < 0
	tick    time.Duration
	grace   time.Duration
	recheck time.Duration // Config.Recheck

	eng      Engine
	db       Store
	streams  Streams
	segs     Segments
	ping     func(ctx context.Context) error
	rounds   func(ctx context.Context) error
	consumer string

	mu          sync.Mutex
	mode        store.SellMode
	known       bool      // mode has been read at least once
	redisDown   time.Time // since when the ping fails; zero while it answers
	redisUp     time.Time // since when it answers; zero while it fails
	flushed     int64     // the degraded epoch this instance handed its acks over for
	fleetEpoch  int64     // the degraded epoch every live instance has handed its acks over for
	fencedEpoch int64     // the degraded epoch this instance fenced Redis for

	// redisBuys counts this instance's buys, and halves of moves, on their
	// way to Redis: a hand-over waits for them, so that each one's order or
	// move (or unknown outcome) is in the acks it hands over.
	redisBuys atomic.Int64
	pinging   atomic.Bool // a tick's ping is under way

	// A Redis that restarted or failed over may have lost writes
	// (OnConnect): restarted blocks this instance's Redis buys until a
	// recovery that began after restartEpoch has ended (epochPending: the
	// suspicion arose before the mode was read; the first mode read sets
	// restartEpoch). firm: a reason other than a promoted master checked
	// before the fleet's trusted nodes were loaded (trust.go), which their
	// first load may lift.
	seen         map[string]seenNode        // node id ("" standalone) -> its last check as a master
	trusted      map[string]store.RedisNode // the fleet's trusted nodes (trust.go), once loaded
	stored       map[string]store.RedisNode // ... as the database has them
	trustLoaded  bool
	suspects     map[string]bool // replication ids of promoted masters not yet repaired
	verified     map[string]bool // ... and of the ones a recovery (or the fleet's trust) vouches for
	restarted    bool
	firm         bool
	epochPending bool
	restartEpoch int64
	// recovering is the newest recovering epoch this instance learned
	// (set): a recovery it learned of only once over took no hand-over
	// from it, and may have begun before what it holds Redis back for.
	recovering int64
	fromRedis  atomic.Bool // RedisSells, kept by changed

	acks ackRing
}

// New returns a seller that sends every buy to Redis until it has read the
// mode (Step). Its OnConnect may be given to Redis clients at once; Wire
// gives it the engine and the store before its first buy.
func New(cfg Config) *Seller {
	host, _ := os.Hostname()
	f := &Seller{cfg: cfg, log: cfg.Logger, off: cfg.Tick < 0, tick: cfg.Tick, grace: cfg.Grace,
		seen: map[string]seenNode{}, suspects: map[string]bool{}, verified: map[string]bool{},
		name: fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randomHex(3))}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	switch {
	case f.tick <= 0 && f.grace > 0:
		f.tick = max(f.grace/3, 50*time.Millisecond)
	case f.tick <= 0:
		f.tick = time.Second
	}
	if f.grace <= 0 {
		f.grace = 3 * f.tick
	}
	if f.recheck = cfg.Recheck; f.recheck <= 0 {
		f.recheck = f.tick
	}
	f.fromRedis.Store(true)
	f.acks.size = cfg.AckRing
	if f.acks.size <= 0 {
		f.acks.size = 1 << 17
	}
	return f
}

// Wire gives the seller its parts. It is called once, before the first
// buy and the first Step.
func (f *Seller) Wire(p Parts) {
	f.eng, f.db, f.streams, f.ping, f.consumer, f.segs = p.Engine, p.Store, p.Streams, p.Ping, p.Consumer, p.Segments
	f.rounds = p.Rounds
}

// Ticks reports whether the seller runs at all (Config.Tick >= 0).
func (f *Seller) Ticks() bool { return !f.off }

// ConsumerAlive tells the order consumer whether another consumer's
// process still runs: false once an instance with that consumer has not
// ticked for three grace periods, so that its pending entries are taken
// over at once instead of after the reclaim's idle time. Unknown consumers,
// or no answer from the database, count as alive (applying an entry twice
// is harmless; taking it needlessly is not worth a guess).
func (f *Seller) ConsumerAlive(ctx context.Context, consumer string) bool {
	if !f.Ticks() {
		return true // no heartbeats from this fleet
	}
	seen, ok, err := f.db.ConsumerSeen(ctx, consumer)
	return err != nil || !ok || time.Since(seen) < 3*f.grace
}

// RedisSells reports whether buys go to Redis: the mode is redis, or not
// known yet (the seller does not tick, or the database never answered),
// and Redis is not held back after a restart. It is read by every buy: one
// atomic load.
func (f *Seller) RedisSells() bool { return f.fromRedis.Load() }

// HeldBack reports whether this instance holds Redis back after seeing it
// restart or fail over, until a recovery has repaired it.
func (f *Seller) HeldBack() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.restarted
}

// RedisUnreachable reports whether this instance's last ping of Redis went
// unanswered.
func (f *Seller) RedisUnreachable() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.redisDown.IsZero()
}

// Sells is the mode as of the last tick and whether Redis sells.
func (f *Seller) Sells() (store.SellMode, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mode, f.fromRedis.Load()
}

// MayRebuild says whether a sale lost from Redis may be rebuilt there from
// the database now: only while the mode row says Redis sells (read now, not
// as of the last tick). Otherwise it is inventory.ErrFenced: never rebuild a
// sale in Redis while the database sells it; Redis gets it back through the
// repair that ends degraded mode.
func (f *Seller) MayRebuild(ctx context.Context) error {
	m, err := f.db.SellMode(ctx)
	if err != nil {
		return err
	}
	if m.Mode != store.ModeRedis {
		return inventory.ErrFenced
	}
	return nil
}

// changed recomputes fromRedis; f.mu is held.
func (f *Seller) changed() {
	f.fromRedis.Store((!f.known || f.mode.Mode == store.ModeRedis) && !f.restarted)
}

// dbSells returns the mode if this instance is to buy on the database now:
// the mode is db, its grace period is over, and this instance and every
// other one seen within the grace period have handed over their acks for
// it (an instance that stopped ticking is passed over once it has not been
// seen for a grace period).
func (f *Seller) dbSells() (store.SellMode, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.mode
	return m, m.Mode == store.ModeDB && f.flushed >= m.Epoch && f.fleetEpoch >= m.Epoch && !time.Now().Before(m.SellsFrom)
}

// set records m, read from the database or just switched to, whoever
// reads it: the tick, or this instance's own recovery as it ends (the hold
// is let go then, not at the next tick: release).
func (f *Seller) set(m store.SellMode) {
	f.mu.Lock()
	f.mode, f.known = m, true
	if m.Mode == store.ModeRecovering {
		f.recovering = max(f.recovering, m.Epoch)
	}
	if f.epochPending {
		// Held back before the mode was read: only a recovery that begins
		// after this read has repaired what was seen.
		f.restartEpoch, f.epochPending = repairedAfter(m), false
	}
	f.release()
	f.changed()
	f.mu.Unlock()
	if f.cfg.OnMode != nil {
		f.cfg.OnMode(m)
	}
}

// ErrRedisRestarted refuses a new connection to a Redis that restarted or
// failed over, until it has been repaired from the database.
var ErrRedisRestarted = errors.New("redis restarted or failed over: not used until it is repaired from the database")

// ErrReplicaConnection refuses a connection to a Redis replica: nothing
// this instance does reads from replicas, and a connection made while a
// node was a replica would skip the check of a promoted master later.
var ErrReplicaConnection = errors.New("redis replica: this instance connects to masters only")

// mayDial marks a context whose Redis calls may open connections while
// Redis is held back after a restart: the recovery's, the consumer's.
type mayDial struct{}

// AllowedToDial marks ctx as the background work's (the order consumer,
// the recovery): its Redis calls may open connections while Redis is held
// back after a restart; buys may not.
func AllowedToDial(ctx context.Context) context.Context {
	return context.WithValue(ctx, mayDial{}, true)
}

// OnConnect runs on every new connection to Redis (the client's
// OnConnect), before the connection is used. A Redis that restarted (a new
// run_id for a node seen before, by this process or by the fleet: see
// trust.go) or a master that was promoted from a replica (it has a
// previous replication id, and this one was neither repaired nor trusted
// by the fleet) may hold counters behind the orders the database already has:
// the rest of an AOF everysec window, a restore, a replica that was behind.
// Selling from them would sell those units again. So this instance stops
// buying from Redis at once — the connection is refused to everyone but
// the recovery and the consumer (AllowedToDial) — and the next tick
// repairs Redis from the database (the recovery) before anyone sells from
// it.
func (f *Seller) OnConnect(ctx context.Context, cn *redis.Conn) error {
	if !f.Ticks() {
		return nil // nothing would recover
	}
	// The connection's INFO checks its node: the node's hook (NodeHook),
	// which it goes through, need not check the node again over another
	// connection (the pool may hold one: TestNodeCheckOnAOneConnectionPool).
	if _, err := f.check(context.WithValue(ctx, checking{}, true), cn); !errors.Is(err, errUnchecked) {
		return err
	}
	return nil // the connection's own commands fail as its INFO did
}

// nodeAsker is a connection (*redis.Conn) or a node's client (*redis.Client).
type nodeAsker interface {
	Info(ctx context.Context, sections ...string) *redis.StringCmd
	ClusterMyID(ctx context.Context) *redis.StringCmd
}

// errUnchecked: the node's INFO (or CLUSTER MYID) went unanswered (the
// caller's context ended, the connection failed): nothing was checked.
var errUnchecked = errors.New("failover: the redis node was not checked")

// unanswered tells an error of a command the node did not answer (errUnchecked)
// from its error reply (a server without the command: nothing to compare).
func unanswered(err error) error {
	var reply redis.Error
	if errors.As(err, &reply) {
		return nil
	}
	return errUnchecked
}

// check reads the INFO of the node behind c and refuses (ErrReplicaConnection,
// ErrRedisRestarted) as OnConnect says. suspect tells whether the node itself
// is the reason to hold Redis back: a replica, or restarted or promoted and
// not repaired since (not merely another node). errUnchecked: the node did not
// answer, so nothing was checked.
func (f *Seller) check(ctx context.Context, c nodeAsker) (suspect bool, err error) {
	info, err := c.Info(ctx, "server", "replication").Result()
	if err != nil {
		// An error reply (a server without INFO: miniredis's is partial)
		// leaves nothing to compare; no answer checked nothing.
		return false, unanswered(err)
	}
	if infoField(info, "role") == "slave" {
		// A Cluster client loads the slot map from any node, replicas
		// included, and keeps that connection in the node's pool. Were the
		// replica promoted, buys would go over it without this check
		// (TestPromotedReplicaIsCheckedOnItsOldConnections).
		return true, ErrReplicaConnection
	}
	runID, replID := infoField(info, "run_id"), infoField(info, "master_replid")
	promoted := infoField(info, "role") == "master" && infoField(info, "second_repl_offset") != "-1" && replID != ""
	node := ""
	if f.cfg.Cluster {
		if node, err = c.ClusterMyID(ctx).Result(); err != nil {
			return false, unanswered(err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	why, firm := "", true
	prev, ok := f.seen[node]
	if ok && prev.RunID != runID && runID != "" {
		why = "redis restarted (new run id)"
	}
	obs := seenNode{RedisNode: store.RedisNode{Node: node, RunID: runID, ReplID: replID}, promoted: promoted, dirty: true}
	// renewed: changed since this instance last checked it as a master, or
	// a promoted master it never checked and does not suspect yet (a
	// replica that took over in a Cluster has a node id of its own).
	renewed := ok && prev.RedisNode != obs.RedisNode || !ok && promoted && !f.suspects[replID] && !f.verified[replID]
	if ok && prev.RedisNode == obs.RedisNode {
		obs.dirty = prev.dirty
	}
	f.seen[node] = obs
	if w, wfirm := f.distrust(obs); w != "" {
		why, firm = w, wfirm || why != ""
		// A node checked for the first time that the fleet's trust does
		// not vouch for has changed as much as one seen before with a new
		// run id: maybe after a recovery that this instance's hold waits
		// for repaired it (TestNodeFirstSeenAsARecoveryEndsIsNotVouchedFor).
		renewed = renewed || !ok
	}
	f.suspect(why, node, firm, renewed)
	switch {
	case !f.restarted:
		return false, nil
	case ctx.Value(mayDial{}) == nil:
		return why != "", ErrRedisRestarted
	}
	// The recovery and the consumer may use a node held back; the node is
	// still the suspect (NodeHook checks it again on the next command).
	return why != "", nil
}

// NodeHook returns a hook for the client of one Redis node (a Cluster
// client's node clients, through OnNewNode; a single node's client) that
// checks the node again, as OnConnect checks a new connection, before a
// command once the last check is older than Config.Recheck, and refuses the
// command as OnConnect refuses a connection if the node is itself the
// reason to hold Redis back.
//
// OnConnect checks each connection once, when it is opened. A node's role
// can change under connections already open: a master demoted to a replica
// (a failover while it was paused or cut off, or a manual one) keeps its
// clients' connections, and once promoted again it is a master with a new
// replication id, maybe behind the one it took over from, reached over
// connections checked in its first time as master
// (TestRepromotedMasterIsCheckedOnItsOldConnections). A node cannot be
// demoted and promoted again by the cluster in less than its
// cluster-node-timeout (a promotion waits that long for the master to be
// failing), so a Recheck shorter than it closes that; an operator's
// CLUSTER FAILOVER TAKEOVER or REPLICAOF NO ONE within it is not caught
// before the next check.
func (f *Seller) NodeHook(node *redis.Client) redis.Hook {
	return &nodeCheck{f: f, node: node, born: time.Now()}
}

// nodeCheck is NodeHook's hook of one node.
type nodeCheck struct {
	f    *Seller
	node *redis.Client
	mu   sync.Mutex // one check at a time
	// born and at read the monotonic clock: a step of the wall clock
	// (NTP) must not leave the node unchecked for the length of the step.
	born time.Time
	at   atomic.Int64 // 1 + nanoseconds from born to the last check that passed; 0 none
}

// due tells whether the last check that passed is older than Recheck.
func (h *nodeCheck) due(now int64) bool {
	at := h.at.Load()
	return at == 0 || now-(at-1) >= int64(h.f.recheck)
}

// checking marks the context of a node check's own commands.
type checking struct{}

// setUp are the commands go-redis sends on a new connection, through the
// node's hooks, before OnConnect: they carry no data, and OnConnect checks
// the connection right after, before anything else goes over it. Checked
// here, the node would be asked over a second connection while the pool's
// turn is held by the one being set up: with a pool of one (the probe's),
// the check waits for the pool's timeout, and the command behind it
// (TestNodeCheckOnAOneConnectionPool).
var setUp = map[string]bool{"hello": true, "auth": true, "select": true, "client": true, "readonly": true}

func (h *nodeCheck) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *nodeCheck) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.fresh(ctx, cmd); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (h *nodeCheck) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := h.fresh(ctx, cmds...); err != nil {
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// fresh checks the node before cmds if its last check is older than
// Config.Recheck (not before a connection's set-up alone).
func (h *nodeCheck) fresh(ctx context.Context, cmds ...redis.Cmder) error {
	// The hot path: one clock read and one atomic load per command; the
	// context and the commands are only looked into once a check is due.
	if !h.due(int64(time.Since(h.born))) || !h.f.Ticks() || ctx.Value(checking{}) != nil ||
		!slices.ContainsFunc(cmds, func(cmd redis.Cmder) bool { return !setUp[cmd.Name()] }) {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := int64(time.Since(h.born))
	if !h.due(now) {
		return nil // checked while this one waited
	}
	suspect, err := h.f.check(context.WithValue(ctx, checking{}, true), h.node)
	switch {
	case errors.Is(err, errUnchecked):
		// Not a check that passed: the next command checks again. This
		// one goes on: it fails as the INFO did (an ended context), or
		// goes over a new connection, which OnConnect checks (go-redis
		// drops a connection that failed).
		return nil
	case errors.Is(err, ErrReplicaConnection):
		// A master demoted under a stale slot map: let the command through
		// for the node to answer MOVED (buys are scripts on keys), and
		// check again next time.
		return nil
	case suspect:
		// Not a check that passed: err is nil only for the work allowed
		// to use a Redis held back (AllowedToDial), and the next command
		// checks again.
		return err
	}
	h.at.Store(now + 1)
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
