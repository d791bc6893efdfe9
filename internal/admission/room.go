package admission

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
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

// AdmissionCheck is what the room says of an admission presented to a buy.
type AdmissionCheck int

const (
	CheckNone     AdmissionCheck = iota // the room holds no such admission of the user
	CheckAdmitted              // live: the buy may spend it
	CheckUsed                  // it bought an order already
	CheckLapsed                // it was not used in time
)

// Errors of the room's operations.
var (
	ErrNoRoom        = errors.New("admission: the sale has no room in Redis")
	ErrNotOpen       = errors.New("admission: the room is not open")
	ErrRoomFull      = errors.New("admission: the room is full")
	ErrNotJoined     = errors.New("admission: the buyer never joined")
	ErrConfigChanged = errors.New("admission: the sale has a room of other settings")
)

// Rooms runs the rooms of one key prefix.
type Rooms struct {
	rdb redis.UniversalClient
	key func(saleID, name string) string
}

// NewRooms returns the rooms on rdb; key names a key under the sale's
// hash tag (inventory.Engine.Key): "sale", "deadlines" and "ptoken:<nonce>"
// are the engine's own, the room's keys are "room:*".
func NewRooms(rdb redis.UniversalClient, key func(saleID, name string) string) *Rooms {
	return &Rooms{rdb: rdb, key: key}
}

// Create makes the sale's room; again with the same settings it changes
// nothing, with others it is ErrConfigChanged. The sale's keys must exist.
func (r *Rooms) Create(ctx context.Context, saleID string, cfg Config) error {
	panic("not yet")
}

// Join places user in the room (one place per user; again: the same
// place, but after a lapse a new one at the back).
func (r *Rooms) Join(ctx context.Context, saleID, user string) (Place, error) {
	panic("not yet")
}

// Place reads user's place (ErrNotJoined if the user never joined).
func (r *Rooms) Place(ctx context.Context, saleID, user string) (Place, error) {
	panic("not yet")
}

// Step lapses admissions past their time and admits the next buyers as
// far as the rate and the stock allow; any instance may call it at any
// time (every 20 ms for each live room). It reports how many it admitted
// and lapsed, and whether the room waits for its draw to be written
// (NeedsDraw).
func (r *Rooms) Step(ctx context.Context, saleID string) (StepResult, error) {
	panic("not yet")
}

// StepResult is what one Step did.
type StepResult struct {
	Admitted, Lapsed int
	NeedsDraw        bool
}

// Entrants are the users of a sealed draw (in no order), for the caller
// to draw (RunDraw) and then WriteDraw; nil, false when there is no draw
// to write (not sealed yet, or written).
func (r *Rooms) Entrants(ctx context.Context, saleID string) ([]string, bool, error) {
	panic("not yet")
}

// WriteDraw puts the draw's order (users, first admitted first) in place;
// the users must be exactly the Entrants. Idempotent.
func (r *Rooms) WriteDraw(ctx context.Context, saleID string, order []string) error {
	panic("not yet")
}

// Check says whether nonce is user's live admission.
func (r *Rooms) Check(ctx context.Context, saleID, user, nonce string) (AdmissionCheck, error) {
	panic("not yet")
}

// MarkUsed records that user's admission nonce bought orderID.
func (r *Rooms) MarkUsed(ctx context.Context, saleID, user, nonce, orderID string) error {
	panic("not yet")
}

// Stats reads the room's counts.
func (r *Rooms) Stats(ctx context.Context, saleID string) (Stats, error) {
	panic("not yet")
}

// SetRate changes the room's rate (0: automatic).
func (r *Rooms) SetRate(ctx context.Context, saleID string, ratePerS int64) error {
	panic("not yet")
}

// Remove deletes every key of the room (the sale is archived).
func (r *Rooms) Remove(ctx context.Context, saleID string) error {
	panic("not yet")
}
