package admission

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/gcra"
	"github.com/seckill/seckill/internal/luascript"
)

// The room in Redis: one Lua script (room.lua) whose operations each run
// atomically under the sale's hash tag, so a room lives in its sale's
// cluster slot and its scripts read the sale's stock. See room.lua for the
// keys and the contract of each operation.

// Config is a room's settings, fixed at its creation but for RatePerS
// (SetRate).
type Config struct {
	OpensAt   time.Time // joins are taken from then
	DrawUntil time.Time // joins before it are in the draw
	EndsAt    time.Time // zero: none; admissions never last past it
	// RatePerS: admissions per second; 0: automatic (as many as the stock
	// rule and CapacityPerS allow).
	RatePerS     int64
	CapacityPerS int64         // admissions per second at most, automatic mode
	AdmitTTL     time.Duration // how long an admission stays valid
	MaxWaiting   int64         // joins past it are refused (ErrRoomFull)
}

// Status is a buyer's status in a room.
type Status string

// A buyer's statuses, as the contract names them.
const (
	Drawing  Status = "drawing"
	Waiting  Status = "waiting"
	Admitted Status = "admitted"
	Used     Status = "used"
	Lapsed   Status = "lapsed"
	SoldOut  Status = "sold_out"
)

// Place is a buyer's place in a room.
type Place struct {
	Status   Status
	JoinedAt time.Time
	InDraw   bool
	// Position and Ahead: while Waiting (Position 1-based, Ahead =
	// Position-1).
	Position, Ahead int64
	// Nonce and AdmittedUntil: while Admitted; the admission token is
	// made from them (and the sale and user) by the caller.
	Nonce         string
	AdmittedUntil time.Time
	OrderID       string // while Used
	// RecentRate: admissions per second over the last 10 s (for eta_s);
	// 0 when nobody was admitted in that time.
	RecentRate float64
}

// Stats are a room's counts: Waiting and Drawing now; Admitted, Used and
// Lapsed totals since the room opened.
type Stats struct {
	Waiting, Drawing, Admitted, Used, Lapsed int64
	Live                                     int64 // unused admissions out now
	RatePerS                                 int64
	DrawSize                                 int64 // buyers in the draw (0 before it)
	Drawn                                    bool  // the draw's order is in place
}

// Errors of the room's operations.
var (
	ErrNoRoom        = errors.New("admission: the sale has no room in Redis")
	ErrNotOpen       = errors.New("admission: the room is not open")
	ErrRoomFull      = errors.New("admission: the room is full")
	ErrNotJoined     = errors.New("admission: the buyer never joined")
	ErrConfigChanged = errors.New("admission: the sale has a room of other settings")
	ErrNoSale        = errors.New("admission: the sale is not in Redis") // Create: nothing to put a room in front of
)

// Rooms runs the rooms of one key prefix.
type Rooms struct {
	rdb redis.UniversalClient
	key func(saleID, name string) string
	// clock, for tests only, stands in for Redis's clock in the script;
	// nil: Redis's TIME, the one clock every instance shares.
	clock func() time.Time

	// buckets: sale id -> its room's bucket count (nb), fixed at create.
	buckets sync.Map
	// facts: sale id -> *roomFacts, the room's facts as last read.
	facts sync.Map
	// factsMaxAge: how old the facts a place read uses may be (0: read
	// with every place); SetFactsMaxAge.
	factsMaxAge time.Duration
	joins       *batcher[string, joined]
	reads       *batcher[string, stateRead]
}

// NewRooms returns the rooms on rdb; key names a key under the sale's
// hash tag (inventory.Engine.Key): "sale" and "deadlines" are the
// engine's own, the room's keys are "room:*".
func NewRooms(rdb redis.UniversalClient, key func(saleID, name string) string) *Rooms {
	r := &Rooms{rdb: rdb, key: key}
	r.joins = newBatcher(maxJoinBatch, r.joinMany)
	r.reads = newBatcher(maxReadBatch, r.readStates)
	return r
}

// SetFactsMaxAge lets a place read (Place) use a room's facts — whether
// nothing can be sold any more, the admissions of the last 10 s — up to
// d old, as Step, Join and other reads left them, instead of reading them
// with the place (a script call): a crowd's polls then cost Redis plain
// reads only. The contract allows a place 1 s old; Step refreshes the
// facts every factsEvery. Call it before the rooms are used.
func (r *Rooms) SetFactsMaxAge(d time.Duration) { r.factsMaxAge = d }

// factsEvery is how often Step reads a room's facts with its step.
const factsEvery = 200 * time.Millisecond

// The most users one join call takes (the rest wait for the next) and the
// most places one pipeline reads.
const (
	maxJoinBatch = 128
	maxReadBatch = 256
)

//go:embed room.lua
var roomSrc string

// roomScript is room.lua after script_now (its clock).
var roomScript = luascript.New("room", gcra.ClockLua+"\n"+roomSrc)

// Replies of room.lua besides 0 (done).
const (
	codeNoRoom   = 1
	codeNotOpen  = 2
	codeFull     = 3
	codeNotJoin  = 4
	codeChanged  = 5
	codeNoSale   = 6
	codeBadDraw  = 7
	drawPartSize = 5000 // users a drawpart call writes at most
)

// drawPart is how many users one call of WriteDraw writes; a variable for
// tests.
var drawPart = drawPartSize

// keys are room.lua's KEYS for the sale.
func (r *Rooms) keys(saleID string) []string {
	return []string{
		r.key(saleID, "room:cfg"), r.key(saleID, "room:dj"), r.key(saleID, "room:dq"),
		r.key(saleID, "room:aq"), r.key(saleID, "room:live"), r.key(saleID, "room:rate"),
		r.key(saleID, "room:b:"), r.key(saleID, "sale"), r.key(saleID, "deadlines"),
	}
}

// run calls operation op of room.lua and returns its reply, whose first
// element is its code; ErrNoRoom for a room that is not there.
func (r *Rooms) run(ctx context.Context, saleID, op string, args ...any) ([]any, error) {
	res, _, err := luascript.Run(ctx, r.rdb, roomScript, r.keys(saleID), append([]any{op, r.scriptNow()}, args...)...)
	return r.reply(saleID, op, res, err)
}

// scriptNow is the script's ARGV[2]: "" for Redis's TIME, the test's clock
// else.
func (r *Rooms) scriptNow() string {
	if r.clock == nil {
		return ""
	}
	return strconv.FormatInt(r.clock().UnixMicro(), 10)
}

// reply decodes the reply res (or err) of operation op.
func (r *Rooms) reply(saleID, op string, res any, err error) ([]any, error) {
	if err != nil {
		return nil, fmt.Errorf("admission: %s of sale %s: %w", op, saleID, err)
	}
	reply, ok := res.([]any)
	if !ok || len(reply) == 0 {
		return nil, fmt.Errorf("admission: %s of sale %s: unexpected reply %v", op, saleID, res)
	}
	code, _ := reply[0].(int64)
	switch code {
	case 0:
		return reply, nil
	case codeNoRoom:
		return nil, ErrNoRoom
	case codeNotOpen:
		return nil, ErrNotOpen
	case codeFull:
		return nil, ErrRoomFull
	case codeNotJoin:
		return nil, ErrNotJoined
	case codeChanged:
		return nil, ErrConfigChanged
	case codeNoSale:
		return nil, ErrNoSale
	case codeBadDraw:
		why := "refused"
		if len(reply) > 1 {
			why = str(reply[1])
		}
		return nil, fmt.Errorf("admission: the draw of sale %s: %s", saleID, why)
	}
	return nil, fmt.Errorf("admission: %s of sale %s: unexpected reply %v", op, saleID, res)
}

// Create makes the sale's room; again with the same settings it changes
// nothing, with others it is ErrConfigChanged. The sale's keys must exist
// (ErrNoSale).
func (r *Rooms) Create(ctx context.Context, saleID string, cfg Config) error {
	if err := cfg.check(); err != nil {
		return err
	}
	_, err := r.run(ctx, saleID, "create", unixMs(cfg.OpensAt), unixMs(cfg.DrawUntil), unixMs(cfg.EndsAt),
		cfg.RatePerS, cfg.CapacityPerS, cfg.AdmitTTL.Milliseconds(), cfg.MaxWaiting)
	return err
}

// check reports a setting the room cannot run by.
func (cfg Config) check() error {
	switch {
	case cfg.DrawUntil.Before(cfg.OpensAt):
		return errors.New("admission: draw_until is before opens_at")
	case !cfg.EndsAt.IsZero() && cfg.EndsAt.Before(cfg.DrawUntil):
		return errors.New("admission: the room ends before draw_until")
	case cfg.RatePerS < 0 || cfg.RatePerS > 1_000_000:
		return errors.New("admission: rate_per_s is not in 0..1000000")
	case cfg.CapacityPerS < 1 || cfg.CapacityPerS > 1_000_000:
		return errors.New("admission: capacity_per_s is not in 1..1000000")
	case cfg.AdmitTTL < time.Millisecond:
		return errors.New("admission: admit_ttl is under 1ms")
	case cfg.MaxWaiting < 1:
		return errors.New("admission: max_waiting is under 1")
	}
	return nil
}

// unixMs is t in unix ms, 0 for the zero time.
func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// Join places user in the room (one place per user; again: the same
// place, but after a lapse a new one at the back). Concurrent joins of a
// room go to Redis together, as one call (batcher).
func (r *Rooms) Join(ctx context.Context, saleID, user string) (Place, error) {
	j, err := r.joins.do(ctx, saleID, user)
	if err != nil {
		return Place{}, err
	}
	return j.place, j.err
}

// joined is one user's outcome of a join call.
type joined struct {
	place Place
	err   error // ErrRoomFull
}

// joinMany joins users (in order; the same user twice is one place) in
// one call of the join operation.
func (r *Rooms) joinMany(ctx context.Context, saleID string, users []string) ([]joined, error) {
	args := make([]any, len(users))
	for i, u := range users {
		args[i] = u
	}
	reply, err := r.run(ctx, saleID, "join", args...)
	if err != nil {
		return nil, err
	}
	if len(reply) != 2+len(users) {
		return nil, fmt.Errorf("admission: join of sale %s: %d replies for %d users", saleID, len(reply)-2, len(users))
	}
	if err := r.keepFacts(saleID, reply[1]); err != nil {
		return nil, err
	}
	out := make([]joined, len(users))
	for i := range users {
		p, _ := reply[2+i].([]any)
		if len(p) == 1 && num(p[0]) == codeFull {
			out[i].err = ErrRoomFull
			continue
		}
		if out[i].place, err = placeOf(p); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// placeByScript reads user's place with the script's place operation:
// what Place must answer (the tests hold them together).
func (r *Rooms) placeByScript(ctx context.Context, saleID, user string) (Place, error) {
	reply, err := r.run(ctx, saleID, "place", user)
	if err != nil {
		return Place{}, err
	}
	return placeOf(reply)
}

// placeOf decodes room.lua's place: {0, status, joined ms, in draw,
// position, nonce, until ms, order id, admissions over 10 s}.
func placeOf(reply []any) (Place, error) {
	if len(reply) != 9 {
		return Place{}, fmt.Errorf("admission: unexpected place %v", reply)
	}
	status, _ := reply[1].(string)
	joined, err1 := strconv.ParseInt(str(reply[2]), 10, 64)
	until, err2 := strconv.ParseInt(str(reply[6]), 10, 64)
	if status == "" || err1 != nil || err2 != nil {
		return Place{}, fmt.Errorf("admission: unexpected place %v", reply)
	}
	p := Place{
		Status:   Status(status),
		JoinedAt: time.UnixMilli(joined),
		InDraw:   num(reply[3]) == 1,
		Nonce:    str(reply[5]),
		OrderID:  str(reply[7]),
	}
	if p.Status == Waiting {
		p.Position = num(reply[4])
		p.Ahead = p.Position - 1
		p.RecentRate = float64(num(reply[8])) / 10
	}
	if p.Status == Admitted {
		p.AdmittedUntil = time.UnixMilli(until)
	}
	return p, nil
}

// str is a reply's string (a Lua number comes as an integer).
func str(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	}
	return ""
}

// num is a reply's integer (0 if it is none).
func num(v any) int64 {
	n, _ := v.(int64)
	return n
}

// Step lapses admissions past their time (a buy that spends one,
// inventory.CheckedBuy.WithGate, makes it used at once) and admits the next buyers as far as the rate and the stock allow;
// any instance may call it at any time (every 20 ms for each live room).
// It reports how many it admitted and lapsed, and whether the room's draw
// is yet to be written (NeedsDraw): until it is, nobody is admitted, but
// in a draw nobody joined, whose (empty) draw is still to be written and
// recorded. Every factsEvery it also reads the room's facts, for Place.
func (r *Rooms) Step(ctx context.Context, saleID string) (StepResult, error) {
	var base [16]byte
	if _, err := rand.Read(base[:]); err != nil {
		return StepResult{}, fmt.Errorf("admission: a nonce base: %w", err)
	}
	wantFacts := 0
	if f := r.cachedFacts(saleID); f == nil || time.Since(f.readAt) >= factsEvery {
		wantFacts = 1
	}
	reply, err := r.run(ctx, saleID, "step", hex.EncodeToString(base[:]), wantFacts)
	if err != nil {
		return StepResult{}, err
	}
	if len(reply) != 4+wantFacts {
		return StepResult{}, fmt.Errorf("admission: unexpected step reply %v", reply)
	}
	if wantFacts == 1 {
		if err := r.keepFacts(saleID, reply[4]); err != nil {
			return StepResult{}, err
		}
	}
	return StepResult{Admitted: int(num(reply[1])), Lapsed: int(num(reply[2])), NeedsDraw: num(reply[3]) == 1}, nil
}

// StepResult is what one Step did.
type StepResult struct {
	Admitted, Lapsed int
	NeedsDraw        bool
}

// Entrants are the users of a sealed draw (in no order), for the caller
// to draw (RunDraw) and then WriteDraw; nil, false when there is no draw
// to write (not sealed yet, or written). A draw nobody joined has none
// (empty, true): its record is still to be written.
func (r *Rooms) Entrants(ctx context.Context, saleID string) ([]string, bool, error) {
	dj := r.key(saleID, "room:dj")
	for attempt := 0; ; attempt++ {
		reply, err := r.run(ctx, saleID, "entrants")
		if err != nil {
			return nil, false, err
		}
		if len(reply) != 3 || num(reply[1]) != 1 {
			return nil, false, nil
		}
		size := num(reply[2])
		users := make([]string, 0, size)
		const page = 10000
		for at := int64(0); at < size; at += page {
			part, err := r.rdb.LRange(ctx, dj, at, at+page-1).Result()
			if err != nil {
				return nil, false, fmt.Errorf("admission: the entrants of sale %s: %w", saleID, err)
			}
			users = append(users, part...)
		}
		if int64(len(users)) == size {
			return users, true, nil
		}
		// The draw was written (its list removed) while read: ask again.
		if attempt == 2 {
			return nil, false, fmt.Errorf("admission: the entrants of sale %s: %d of %d read", saleID, len(users), size)
		}
	}
}

// WriteDraw puts the draw's order (users, first admitted first) in place;
// the users must be exactly the Entrants. Idempotent; instances writing
// the same order at once agree.
func (r *Rooms) WriteDraw(ctx context.Context, saleID string, order []string) error {
	reply, err := r.run(ctx, saleID, "entrants")
	if err != nil {
		return err
	}
	if num(reply[1]) != 1 {
		// Written already (or not sealed: drawdone says so).
		_, err := r.run(ctx, saleID, "drawdone")
		return err
	}
	if size := num(reply[2]); int64(len(order)) != size {
		return fmt.Errorf("admission: the draw of sale %s: %d users for %d entrants", saleID, len(order), size)
	}
	for at := 0; at < len(order); at += drawPart {
		part := order[at:min(at+drawPart, len(order))]
		args := make([]any, 0, len(part)+1)
		args = append(args, at)
		for _, u := range part {
			args = append(args, u)
		}
		if _, err := r.run(ctx, saleID, "drawpart", args...); err != nil {
			return err
		}
	}
	_, err = r.run(ctx, saleID, "drawdone")
	return err
}

// Stats reads the room's counts.
func (r *Rooms) Stats(ctx context.Context, saleID string) (Stats, error) {
	reply, err := r.run(ctx, saleID, "stats")
	if err != nil {
		return Stats{}, err
	}
	if len(reply) != 10 {
		return Stats{}, fmt.Errorf("admission: unexpected stats reply %v", reply)
	}
	return Stats{
		Waiting: num(reply[1]), Drawing: num(reply[2]), Admitted: num(reply[3]), Used: num(reply[4]),
		Lapsed: num(reply[5]), Live: num(reply[6]), RatePerS: num(reply[7]), DrawSize: num(reply[8]),
		Drawn: num(reply[9]) == 1,
	}, nil
}

// SetRate changes the room's rate (0: automatic).
func (r *Rooms) SetRate(ctx context.Context, saleID string, ratePerS int64) error {
	if ratePerS < 0 || ratePerS > 1_000_000 {
		return errors.New("admission: rate_per_s is not in 0..1000000")
	}
	_, err := r.run(ctx, saleID, "rate", ratePerS)
	return err
}

// Remove deletes every key of the room (the sale is archived); a room
// that is not there is no error.
func (r *Rooms) Remove(ctx context.Context, saleID string) error {
	_, err := r.run(ctx, saleID, "remove")
	r.buckets.Delete(saleID)
	r.facts.Delete(saleID)
	return err
}
