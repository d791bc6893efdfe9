package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/seckill/seckill/internal/admission"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/ratelimit"
	"github.com/seckill/seckill/internal/store"
)

// A sale may put a waiting room in front of its buys (SaleSettings.
// Admission): buyers join it, wait for their turn (a draw among those who
// joined before draw_until, then arrival), and buy with the admission
// their turn gives them (verbs_orders.go). The room's places live in
// Redis under the sale's hash tag (admission.Rooms); the database keeps
// its secret, its rate and its draw's record (store.Room); a loop on every
// instance steps every live room (room_loop.go).

// Errors of the rooms' verbs, to test with errors.Is.
var (
	// ErrAdmissionNotEnabled: the sale has no waiting room.
	ErrAdmissionNotEnabled = errors.New("seckill: the sale has no waiting room")
	// ErrAdmissionRequired: the sale is bought with admissions from its
	// waiting room, not purchase tokens.
	ErrAdmissionRequired = errors.New("seckill: the sale is bought with an admission from its waiting room")
)

var (
	errAdmissionNotEnabled = &apiError{Status: http.StatusConflict, Code: "admission_not_enabled",
		Message: "this sale has no waiting room", Kind: ErrAdmissionNotEnabled}
	errAdmissionRequired = &apiError{Status: http.StatusConflict, Code: "admission_required",
		Message: "this sale is bought with an admission from its waiting room (POST /v1/sales/{sale}/queue), not with a purchase token",
		Kind:    ErrAdmissionRequired}
	errRoomFull = &apiError{Status: http.StatusTooManyRequests, Code: "room_full", RetryAfter: roomFullRetry,
		Message: "the waiting room is full; retry later", Kind: admission.ErrRoomFull}
	errNotJoined = &apiError{Status: http.StatusNotFound, Code: "not_found",
		Message: "you have not joined this sale's waiting room", Kind: admission.ErrNotJoined}
	errRoomNotOpen = &apiError{Status: http.StatusConflict, Code: "sale_not_active",
		Message: "the waiting room is not open: before its opens_at, or the sale has ended", Kind: inventory.ErrSaleNotActive}
	// errAdmissionDenied refuses a buy of a sale with a room without a
	// live admission of the buyer (as a purchase token is refused).
	errAdmissionDenied = &apiError{Status: http.StatusForbidden, Code: "permission_denied",
		Message: "a live, unused admission of this sale (X-Purchase-Token) is required: join its waiting room",
		Kind:    inventory.ErrTokenRequired}
	// errRoomNeedsRedis refuses a buy of a sale with a room while the
	// database sells: admissions are kept in Redis.
	errRoomNeedsRedis = &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", RetryAfter: 1,
		Message: "this sale admits buyers from its waiting room, which is kept in redis; it does not sell while the database sells (degraded mode): retry when redis is back",
		Kind:    inventory.ErrUnavailable}
)

// roomFullRetry is the Retry-After of room_full, in seconds.
const roomFullRetry = 10

// roomFactsMaxAge is how old the room-wide part of a place read (sold out
// or not, the admissions of the last 10 s) may be: the rooms' loop reads
// it every 200 ms with its steps, so a crowd's reads cost Redis plain
// reads only; the contract allows a place 1 s old.
const roomFactsMaxAge = 500 * time.Millisecond

// queueReads limits a buyer's reads and joins of rooms: the contract's
// "more than 10 times a second may get 429". It is checked in process
// (Service.queueLimits), each instance on its own: a crowd polling its
// places costs Redis nothing for it.
var queueReads = ratelimit.PerSecond(10, 10)

// The in-process limiter of queueReads: its shards, and how many buyers
// it remembers in all (the least recently seen forgotten first: a buyer
// forgotten starts afresh, which the contract's "may" allows).
const (
	queueLimitShards = 64
	queueLimitKeys   = 1 << 17 // a key matters for a second: 131,072 readers a second
)

// allowQueue counts one join or read of user against queueReads, or
// answers 429.
func (s *Service) allowQueue(ctx context.Context, user string) error {
	res, err := s.queueLimits.Allow(ctx, "q:"+user, queueReads)
	if err != nil {
		return err
	}
	if !res.Allowed {
		return s.limited("queue", &queueReads, res.RetryAfter)
	}
	return nil
}

// Place is a buyer's place in a sale's waiting room, as the service shows
// it.
type Place struct {
	SaleID string
	admission.Place
	// Admission is the admission token while Admitted: a buy carries it
	// (BuyRequest.PurchaseToken, the X-Purchase-Token header).
	Admission string
	// ETA, while Waiting, is Ahead ÷ the admissions per second of the
	// last 10 s; HasETA is false when nobody was admitted in that time.
	ETA    time.Duration
	HasETA bool
	// PollAfter is when to read the place again: spread, so that a crowd
	// does not read at once.
	PollAfter time.Duration
}

// JoinQueue places a buyer in the sale's waiting room (again: the same
// place; after a lapse, a new one at the back). Refusals:
// ErrAdmissionNotEnabled, admission.ErrRoomFull, inventory.ErrSaleNotActive
// (before opens_at, or the sale has ended), ErrThrottled.
func (s *Service) JoinQueue(ctx context.Context, saleID, userID string) (Place, error) {
	if err := checkQueueUser(userID); err != nil {
		return Place{}, verbError(err)
	}
	p, err := s.queuePlace(ctx, saleID, userID, true)
	return p, verbError(err)
}

// QueuePlace reads a buyer's place in the sale's waiting room;
// admission.ErrNotJoined if the buyer never joined.
func (s *Service) QueuePlace(ctx context.Context, saleID, userID string) (Place, error) {
	if err := checkQueueUser(userID); err != nil {
		return Place{}, verbError(err)
	}
	p, err := s.queuePlace(ctx, saleID, userID, false)
	return p, verbError(err)
}

// checkQueueUser refuses a user id a caller in Go gives that no buyer's JWT
// could carry (the HTTP routes' come checked): its place could never buy.
func checkQueueUser(userID string) error {
	if !inventory.ValidID(userID) {
		return &inventory.InvalidError{Field: "user id", Reason: "must match ^[A-Za-z0-9_.:-]{1,64}$"}
	}
	return nil
}

// queuePlace joins (join) or reads a buyer's place.
func (s *Service) queuePlace(ctx context.Context, saleID, user string, join bool) (Place, error) {
	settings, err := s.roomSale(ctx, saleID)
	if err != nil {
		return Place{}, err
	}
	if err := s.allowQueue(ctx, user); err != nil {
		return Place{}, err
	}
	op := s.rooms.Place
	if join {
		op = s.rooms.Join
	}
	p, err := op(ctx, saleID, user)
	if errors.Is(err, admission.ErrNoRoom) {
		if err = s.remakeRoom(ctx, settings); err == nil {
			p, err = op(ctx, saleID, user)
		}
	}
	if err != nil {
		return Place{}, roomError(err)
	}
	return s.placeOf(settings, user, p, time.Now()), nil
}

// roomSale is the settings of a sale with a room: an unknown sale is not
// found, one without a room ErrAdmissionNotEnabled.
func (s *Service) roomSale(ctx context.Context, saleID string) (saleSettings, error) {
	if !inventory.ValidID(saleID) {
		return saleSettings{}, &inventory.InvalidError{Field: "sale id", Reason: "must match ^[A-Za-z0-9_.:-]{1,64}$"}
	}
	settings, err := s.settings(ctx, saleID)
	if err != nil {
		return saleSettings{}, err
	}
	if settings.Admission == nil {
		return saleSettings{}, errAdmissionNotEnabled
	}
	return settings, nil
}

// roomError is the answer to an error of the room's operations.
func roomError(err error) error {
	switch {
	case errors.Is(err, admission.ErrRoomFull):
		return errRoomFull
	case errors.Is(err, admission.ErrNotJoined):
		return errNotJoined
	case errors.Is(err, admission.ErrNotOpen), errors.Is(err, admission.ErrNoRoom):
		// No room now: the sale is gone from Redis for good (archived).
		return errRoomNotOpen
	}
	if _, ok := errors.AsType[*inventory.ArchivedError](err); ok {
		return errRoomNotOpen
	}
	return err
}

// placeOf is the room's place of user as the service shows it at now.
func (s *Service) placeOf(settings saleSettings, user string, p admission.Place, now time.Time) Place {
	out := Place{SaleID: settings.ID, Place: p}
	if p.Status == admission.Admitted {
		out.Admission = s.makeAdmissionToken(settings.ID, user, p.Nonce, p.AdmittedUntil)
	}
	if p.Status == admission.Waiting && p.RecentRate > 0 {
		out.ETA = time.Duration(math.Ceil(float64(p.Ahead)/p.RecentRate)) * time.Second
		out.HasETA = true
	}
	out.PollAfter = pollAfter(out, settings.Admission.DrawUntil, now)
	return out
}

// The bounds of a place's poll_after.
const (
	minPoll = time.Second
	maxPoll = 30 * time.Second
)

// pollAfter is when a buyer should read the place again: about when it may
// have changed (the draw, half the wait, half the admission's time left),
// between minPoll and maxPoll, plus up to a quarter more at random so that
// the buyers who read together do not come back together.
func pollAfter(p Place, drawUntil, now time.Time) time.Duration {
	base := 10 * time.Second // used, lapsed, sold out: little to change
	switch p.Status {
	case admission.Drawing:
		base = drawUntil.Sub(now)
	case admission.Waiting:
		base = 5 * time.Second
		if p.HasETA {
			base = p.ETA / 2
		}
	case admission.Admitted:
		base = p.AdmittedUntil.Sub(now) / 2
	}
	base = min(max(base, minPoll), maxPoll)
	return base + rand.N(base/4+1)
}

// QueueStats reads the counts of the sale's waiting room.
func (s *Service) QueueStats(ctx context.Context, saleID string) (admission.Stats, error) {
	st, err := s.queueStats(ctx, saleID)
	return st, verbError(err)
}

func (s *Service) queueStats(ctx context.Context, saleID string) (admission.Stats, error) {
	settings, err := s.roomSale(ctx, saleID)
	if err != nil {
		return admission.Stats{}, err
	}
	st, err := s.rooms.Stats(ctx, saleID)
	if errors.Is(err, admission.ErrNoRoom) {
		if err = s.remakeRoom(ctx, settings); err == nil {
			st, err = s.rooms.Stats(ctx, saleID)
		}
	}
	if err != nil {
		return admission.Stats{}, roomError(err)
	}
	return st, nil
}

// SetAdmissionRate changes the admissions per second of the sale's room
// (0: automatic, 1..1,000,000) and returns its counts then.
func (s *Service) SetAdmissionRate(ctx context.Context, saleID string, ratePerS int64) (admission.Stats, error) {
	st, err := s.setAdmissionRate(ctx, saleID, ratePerS)
	return st, verbError(err)
}

func (s *Service) setAdmissionRate(ctx context.Context, saleID string, ratePerS int64) (admission.Stats, error) {
	if ratePerS < 0 || ratePerS > maxRatePerS {
		return admission.Stats{}, &inventory.InvalidError{Field: "rate_per_s", Reason: reasonRate}
	}
	if _, err := s.roomSale(ctx, saleID); err != nil {
		return admission.Stats{}, err
	}
	// The database first: a room Redis loses is made again at this rate.
	if err := s.db.SetRoomRate(ctx, saleID, ratePerS); err != nil {
		return admission.Stats{}, err
	}
	err := s.rooms.SetRate(ctx, saleID, ratePerS)
	if err != nil && !errors.Is(err, admission.ErrNoRoom) { // no room: made again at the new rate
		return admission.Stats{}, roomError(err)
	}
	return s.queueStats(ctx, saleID)
}

// Draw is the published record of the draw of the sale's room: only the
// Commitment before the draw, every field after it (also once the sale is
// archived: the database keeps it).
func (s *Service) Draw(ctx context.Context, saleID string) (admission.Draw, error) {
	raw, err := s.drawRecord(ctx, saleID)
	if err != nil {
		return admission.Draw{}, verbError(err)
	}
	var d admission.Draw
	if err := json.Unmarshal(raw, &d); err != nil {
		return admission.Draw{}, fmt.Errorf("seckill: the draw of sale %s: %w", saleID, err)
	}
	return d, nil
}

// drawRecord is Draw as JSON. A record drawn is kept in memory for
// drawnTTL (it never changes); the commitment alone, for undrawnTTL, so
// that a crowd of readers costs the database one read a second at most.
func (s *Service) drawRecord(ctx context.Context, saleID string) ([]byte, error) {
	if _, err := s.roomSale(ctx, saleID); err != nil {
		return nil, err
	}
	now := time.Now().UnixNano()
	if raw, ok := s.draws.Get(saleID, now); ok {
		return raw, nil
	}
	room, err := s.db.Room(ctx, saleID)
	if err != nil {
		return nil, err
	}
	raw, ttl := room.Draw, drawnTTL
	if raw == nil {
		raw, _ = json.Marshal(admission.Draw{Commitment: room.Commitment})
		ttl = undrawnTTL
	}
	s.draws.Set(saleID, raw, now+int64(ttl), now)
	return raw, nil
}

// How long drawRecord keeps a record in memory, and how many.
const (
	drawnTTL      = 10 * time.Minute
	undrawnTTL    = time.Second
	maxCachedDraw = 64
)

// createRoom makes the room of a sale created in the database just now:
// its row, with a new secret (the undo of the create removes it with the
// sale).
func (s *Service) createRoom(ctx context.Context, sale checkedSale) error {
	secret, commitment, err := admission.NewSecret()
	if err != nil {
		return err
	}
	return s.db.CreateRoom(ctx, store.Room{SaleID: sale.ID, Secret: secret, Commitment: commitment,
		RatePerS: sale.Admission.RatePerS, CreatedAt: time.Now()})
}

// remakeRoom makes again in Redis the room of a sale that lives but whose
// room Redis lost (a restart without persistence, a flush): the sale
// first (rebuilt from the database; an archived one stays gone), then the
// room, empty, at its rate now. The places it held are lost; admissions
// spent stay spent (the sale's spent tokens are rebuilt with it).
func (s *Service) remakeRoom(ctx context.Context, settings saleSettings) error {
	if _, err := s.eng.Stock(ctx, settings.ID); err != nil {
		return err
	}
	room, err := s.db.Room(ctx, settings.ID)
	if err != nil {
		return err
	}
	if err := s.rooms.Create(ctx, settings.ID, roomConfig(settings.Sale, *settings.Admission, room.RatePerS)); err != nil {
		return err
	}
	s.log.Warn("made a waiting room again that redis lost: the places it held are lost", "sale", settings.ID)
	return nil
}

// removeRoom removes from Redis the room of a sale being archived, if it
// has one: its places go with the sale's keys (its draw stays in the
// database). The loop never makes it again: the sale is archiving.
func (s *Service) removeRoom(ctx context.Context, saleID string) error {
	settings, err := s.settings(ctx, saleID)
	if errors.Is(err, inventory.ErrNotFound) { // a sale of the engine alone has none
		return nil
	}
	if err != nil || settings.Admission == nil {
		return err
	}
	return s.rooms.Remove(ctx, saleID)
}
