package seckill

import (
	"context"
	"net/http"
	"time"

	"github.com/seckill/seckill/internal/admission"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/reconcile"
	"github.com/seckill/seckill/internal/service"
)

// System is a running seckill: the inventory, the order pipeline into the
// database and the background work that keeps them in step, and the HTTP
// API if the Config asked for it. Its methods are safe for concurrent use,
// and any number of Systems on the same Redis and database act as one.
type System struct {
	svc *service.Service
}

// Open connects to Redis and the database (or starts the embedded ones),
// creates or upgrades seckill's tables, and starts the background work: the
// order consumer, the expiry of unpaid reservations, the archiver, the
// reconciliation loop and degraded mode's watch; and the HTTP server, if
// Config.Addr is set. Its error says in one line what could not be reached.
// Shutdown stops it all.
func Open(ctx context.Context, cfg Config) (*System, error) {
	sc, err := cfg.internal()
	if err != nil {
		return nil, err
	}
	svc, err := service.Start(ctx, sc)
	if err != nil {
		return nil, err
	}
	return &System{svc: svc}, nil
}

// Run opens a System and runs it until ctx is done, then shuts it down,
// giving in-flight requests and the order consumer's batch up to 20 s:
// what `seckill serve` does.
func Run(ctx context.Context, cfg Config) error {
	sys, err := Open(ctx, cfg)
	if err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return sys.Shutdown(sctx)
}

// Shutdown stops the HTTP server after the requests in flight, lets the
// order consumer finish its batch, stops the background work and closes
// the connections the System opened (never a Config.Redis client).
func (s *System) Shutdown(ctx context.Context) error { return s.svc.Shutdown(ctx) }

// Handler is the HTTP API of docs/api.md, to mount in a program's own
// server (with Config.Addr empty) or to test with net/http/httptest. It
// serves every route of the contract and the operations routes beside it:
// the live dashboard at "/", GET /v1/live, /metrics, /healthz, /readyz and
// /openapi.json, which need no token. Mount it where only operators reach
// those, or in front of a router that keeps them in. Operators'
// routes take Config.AdminToken and buyers' tokens are signed with
// Config.JWTSecret: set both (generated ones are only logged).
func (s *System) Handler() http.Handler { return s.svc.Handler() }

// URL is the base URL the HTTP API listens on ("http://127.0.0.1:8080"),
// or "" if Config.Addr was empty.
func (s *System) URL() string { return s.svc.URL() }

// CreateSale creates a sale: the database first (the system of record),
// then Redis. A sale whose id is in use is ErrExists; a create that fails
// part way leaves nothing behind.
func (s *System) CreateSale(ctx context.Context, sale Sale) (SaleState, error) {
	def := service.SaleDef{
		Sale: inventory.Sale{ID: sale.ID, PerUserLimit: sale.PerUserLimit, StartsAt: sale.StartsAt,
			EndsAt: sale.EndsAt, PaymentTimeout: sale.PaymentTimeout},
		SaleSettings: service.SaleSettings{RequirePurchaseToken: sale.RequirePurchaseToken,
			RateLimits: service.RateLimits{PerUser: sale.RateLimits.PerUser, PerIP: sale.RateLimits.PerIP, PerSale: sale.RateLimits.PerSale}},
		Segments: make([]int64, len(sale.Items)),
	}
	if a := sale.Admission; a != nil {
		if a.AdmitTTL%time.Second != 0 {
			return SaleState{}, &InvalidError{Field: "admission.admit_ttl", Reason: "must be whole seconds"}
		}
		def.Admission = &service.AdmissionSettings{OpensAt: a.OpensAt, DrawUntil: a.DrawUntil, RatePerS: a.RatePerS,
			CapacityPerS: a.CapacityPerS, AdmitTTLS: int64(a.AdmitTTL / time.Second), MaxWaiting: a.MaxWaiting}
	}
	for i, it := range sale.Items {
		def.Sale.Items = append(def.Sale.Items, inventory.Item{SKU: it.SKU, Stock: it.Stock})
		def.Segments[i] = int64(it.Segments)
	}
	v, err := s.svc.CreateSale(ctx, def)
	return stateOf(v), err
}

// Sale returns the sale as it stands now: its definition, status and
// counters (a hot item's segments summed). It answers for an archived sale
// too, from the database.
func (s *System) Sale(ctx context.Context, saleID string) (SaleState, error) {
	v, err := s.svc.Sale(ctx, saleID)
	return stateOf(v), err
}

// Buy buys every line of the request for its buyer, or nothing: ErrSoldOut,
// ErrLimitExceeded, ErrSaleNotActive, ErrThrottled, ErrTokenRequired, ... say
// why. An accepted buy is one order, on its way to the database. Resent
// with the same IdempotencyKey, it returns the same order (Replayed) and
// changes nothing, even once the sale has sold out or ended.
func (s *System) Buy(ctx context.Context, req BuyRequest) (Receipt, error) {
	lines := make([]inventory.Line, len(req.Lines))
	for i, l := range req.Lines {
		lines[i] = inventory.Line{SKU: l.SKU, Qty: l.Qty}
	}
	rc, err := s.svc.Buy(ctx, service.BuyRequest{SaleID: req.SaleID, UserID: req.UserID, Lines: lines,
		IdempotencyKey: req.IdempotencyKey, PurchaseToken: req.PurchaseToken})
	if err != nil {
		return Receipt{}, err
	}
	o, _ := orderOf(rc.Order, nil)
	return Receipt{Order: o, Remaining: rc.Remaining, Replayed: rc.Replayed}, nil
}

// Order returns an order, from Redis while it is pending, from the
// database once confirmed.
func (s *System) Order(ctx context.Context, orderID string) (Order, error) {
	return orderOf(s.svc.Order(ctx, orderID))
}

// Cancel cancels an order of userID ("" cancels any buyer's, as an
// operator): its units go back to stock and the buyer's quota, once. A
// second cancel changes nothing and returns the same order. Another buyer's
// order is ErrNotFound.
func (s *System) Cancel(ctx context.Context, orderID, userID string) (Order, error) {
	return orderOf(s.svc.Cancel(ctx, orderID, userID))
}

// Pay records the payment of a reservation of userID ("" for any buyer's)
// under paymentRef (1 to 128 printable characters). Paying again with the
// same ref changes nothing; with another it is ErrAlreadyPaid; an expired or
// cancelled order is ErrOrderClosed. Exactly one of a pay and the expiry at
// the order's PayBy wins.
func (s *System) Pay(ctx context.Context, orderID, userID, paymentRef string) (Order, error) {
	return orderOf(s.svc.Pay(ctx, orderID, userID, paymentRef))
}

// Restock adds qty units of sku to a live sale and returns what remains.
func (s *System) Restock(ctx context.Context, saleID, sku string, qty int64) (int64, error) {
	return s.svc.Restock(ctx, saleID, sku, qty)
}

// Pause stops a sale from selling until Resume; its buyers get
// ErrSaleNotActive meanwhile.
func (s *System) Pause(ctx context.Context, saleID string) (SaleState, error) {
	v, err := s.svc.SetPaused(ctx, saleID, true)
	return stateOf(v), err
}

// Resume lets a paused sale sell again.
func (s *System) Resume(ctx context.Context, saleID string) (SaleState, error) {
	v, err := s.svc.SetPaused(ctx, saleID, false)
	return stateOf(v), err
}

// CloseSale ends a sale now. Once every order of it is in the database and
// no payment awaits, its Redis keys are removed; it is read from the
// database from then on.
func (s *System) CloseSale(ctx context.Context, saleID string) (SaleState, error) {
	v, err := s.svc.CloseSale(ctx, saleID)
	return stateOf(v), err
}

// PurchaseToken issues a purchase token for userID in a sale that requires
// them (Sale.RequirePurchaseToken): the first accepted buy that carries it
// spends it.
func (s *System) PurchaseToken(ctx context.Context, saleID, userID string) (PurchaseToken, error) {
	tok, until, err := s.svc.IssuePurchaseToken(ctx, saleID, userID)
	return PurchaseToken{Token: tok, ExpiresAt: until}, err
}

// Reconcile compares the sale's counters in Redis, the orders on their way
// and the database's, item by item. It is exact while the sale sells.
func (s *System) Reconcile(ctx context.Context, saleID string) (Report, error) {
	r, err := s.svc.Reconcile(ctx, saleID)
	return reportOf(r), err
}

// Join places a buyer in a sale's waiting room and returns the place: the
// same place if the buyer joined already, a new one at the back after a
// lapse. ErrRoomFull, ErrSaleNotActive (before OpensAt, or the sale has
// ended), ErrAdmissionNotEnabled and ErrThrottled (more than 10 joins and
// reads a second) say why not.
func (s *System) Join(ctx context.Context, saleID, userID string) (Place, error) {
	return placeOf(s.svc.JoinQueue(ctx, saleID, userID))
}

// Place reads a buyer's place in a sale's waiting room; ErrNotJoined if
// the buyer never joined. While admitted, Place.Admission is what to buy
// with.
func (s *System) Place(ctx context.Context, saleID, userID string) (Place, error) {
	return placeOf(s.svc.QueuePlace(ctx, saleID, userID))
}

// QueueStats reads the counts of a sale's waiting room.
func (s *System) QueueStats(ctx context.Context, saleID string) (QueueStats, error) {
	return queueStatsOf(s.svc.QueueStats(ctx, saleID))
}

// SetAdmissionRate changes the admissions per second of a sale's waiting
// room during the sale (0: automatic).
func (s *System) SetAdmissionRate(ctx context.Context, saleID string, ratePerS int64) (QueueStats, error) {
	return queueStatsOf(s.svc.SetAdmissionRate(ctx, saleID, ratePerS))
}

// Draw returns the published record of a waiting room's draw: the
// commitment alone before the draw, the whole record after it, also once
// the sale is archived.
func (s *System) Draw(ctx context.Context, saleID string) (Draw, error) {
	return s.svc.Draw(ctx, saleID)
}

func placeOf(p service.Place, err error) (Place, error) {
	if err != nil {
		return Place{}, err
	}
	return Place{Status: p.Status, JoinedAt: p.JoinedAt, InDraw: p.InDraw, Position: p.Position, Ahead: p.Ahead,
		ETA: p.ETA, HasETA: p.HasETA, Admission: p.Admission, AdmittedUntil: p.AdmittedUntil, OrderID: p.OrderID,
		PollAfter: p.PollAfter}, nil
}

func queueStatsOf(st admission.Stats, err error) (QueueStats, error) {
	if err != nil {
		return QueueStats{}, err
	}
	return QueueStats{Waiting: st.Waiting, Drawing: st.Drawing, Live: st.Live, Admitted: st.Admitted, Used: st.Used,
		Lapsed: st.Lapsed, RatePerS: st.RatePerS, DrawSize: st.DrawSize}, nil
}

// orderOf is the public form of an order the service returned, with its
// error (the zero Order with an error).
func orderOf(o inventory.Order, err error) (Order, error) {
	if err != nil {
		return Order{}, err
	}
	out := Order{ID: o.ID, SaleID: o.SaleID, UserID: o.UserID, Status: o.Status, Items: make([]Line, len(o.Items)),
		IdempotencyKey: o.IdempotencyKey, CreatedAt: o.CreatedAt, Payment: o.Payment, PayBy: o.PayBy, PaymentRef: o.PaymentRef}
	for i, l := range o.Items {
		out.Items[i] = Line{SKU: l.SKU, Qty: l.Qty}
	}
	return out, nil
}

func stateOf(v service.SaleView) SaleState {
	st := SaleState{Status: v.State.Status, Archived: v.Archived}
	sale := v.State.Sale
	st.Sale = Sale{ID: sale.ID, PerUserLimit: sale.PerUserLimit, StartsAt: sale.StartsAt, EndsAt: sale.EndsAt,
		PaymentTimeout: sale.PaymentTimeout, RequirePurchaseToken: v.Settings.RequirePurchaseToken,
		RateLimits: RateLimits{PerUser: v.Settings.PerUser, PerIP: v.Settings.PerIP, PerSale: v.Settings.PerSale}}
	if a := v.Settings.Admission; a != nil {
		st.Sale.Admission = &Admission{OpensAt: a.OpensAt, DrawUntil: a.DrawUntil, RatePerS: a.RatePerS,
			CapacityPerS: a.CapacityPerS, AdmitTTL: time.Duration(a.AdmitTTLS) * time.Second, MaxWaiting: a.MaxWaiting}
	}
	for _, it := range v.State.Items {
		st.Sale.Items = append(st.Sale.Items, Item{SKU: it.SKU, Stock: it.Stocked})
		st.Items = append(st.Items, ItemState{SKU: it.SKU, Remaining: it.Remaining, Stocked: it.Stocked,
			Sold: it.Sold, AwaitingPayment: it.Awaiting})
	}
	return st
}

func reportOf(r reconcile.Report) Report {
	out := Report{Sale: r.Sale, Consistent: r.Consistent}
	for _, it := range r.Items {
		out.Items = append(out.Items, ReportItem{SKU: it.SKU, Stocked: it.Stocked, Remaining: it.Remaining, Sold: it.Sold,
			OrdersInDB: it.OrdersInDB, InFlight: it.InFlight, Moving: it.Moving, Drift: it.Drift})
	}
	return out
}
