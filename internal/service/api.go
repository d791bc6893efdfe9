package service

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/segment"
)

// routes registers the contract's endpoints. Each path is registered once
// and dispatches on the method itself, so a wrong method gets the JSON
// error body too (405), and anything unknown is a JSON 404.
func (s *Service) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(path string, methods map[string]handler) {
		for m := range methods {
			s.endpoints = append(s.endpoints, m+" "+strings.TrimSuffix(path, "{$}"))
		}
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			h, ok := methods[r.Method]
			if !ok {
				allowed := make([]string, 0, len(methods))
				for m := range methods {
					allowed = append(allowed, m)
				}
				w.Header().Set("Allow", strings.Join(allowed, ", "))
				writeError(w, r, s.logFor(r), &apiError{Status: http.StatusMethodNotAllowed, Code: "invalid_argument",
					Message: r.Method + " is not allowed here"})
				return
			}
			if err := h(w, r); err != nil {
				s.fail(w, r, err)
			}
		})
	}
	// An operator's change to a sale shows at once in GET /v1/sales
	// (sales_list.go) on this instance: its verb says so.
	handle("/v1/admin/sales", map[string]handler{"POST": s.createSale})
	handle("/v1/admin/sales/{sale}/items/{sku}/restock", map[string]handler{"POST": s.restock})
	handle("/v1/admin/sales/{sale}/pause", map[string]handler{"POST": s.setPaused(true)})
	handle("/v1/admin/sales/{sale}/resume", map[string]handler{"POST": s.setPaused(false)})
	handle("/v1/admin/sales/{sale}/close", map[string]handler{"POST": s.closeSale})
	handle("/v1/admin/sales/{sale}/reconcile", map[string]handler{"GET": s.reconcile})
	handle("/v1/admin/degraded", map[string]handler{"GET": s.getDegraded, "PUT": s.putDegraded})
	handle("/v1/sales", map[string]handler{"GET": s.listSales})
	handle("/v1/live", map[string]handler{"GET": s.liveEvents})
	handle("/v1/sales/{sale}", map[string]handler{"GET": s.getSale})
	handle("/v1/sales/{sale}/orders", map[string]handler{"POST": s.buy})
	handle("/v1/sales/{sale}/purchase-tokens", map[string]handler{"POST": s.issuePurchaseToken})
	handle("/v1/sales/{sale}/queue", map[string]handler{"POST": s.joinQueue, "GET": s.getPlace})
	handle("/v1/sales/{sale}/queue/draw", map[string]handler{"GET": s.getDraw})
	handle("/v1/admin/sales/{sale}/queue", map[string]handler{"GET": s.getQueueStats})
	handle("/v1/admin/sales/{sale}/queue/rate", map[string]handler{"POST": s.setQueueRate})
	handle("/v1/orders/{order}", map[string]handler{"GET": s.getOrder})
	handle("/v1/orders/{order}/cancel", map[string]handler{"POST": s.cancel})
	handle("/v1/orders/{order}/pay", map[string]handler{"POST": s.pay})
	handle("/healthz", map[string]handler{"GET": func(w http.ResponseWriter, r *http.Request) error {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		return nil
	}})
	handle("/readyz", map[string]handler{"GET": s.ready})
	handle("/metrics", map[string]handler{"GET": plain(s.metrics.handler().ServeHTTP)})
	handle("/openapi.json", map[string]handler{"GET": plain(serveOpenAPI)})
	handle("/{$}", map[string]handler{"GET": plain(s.dashboard)})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, s.logFor(r), errNotFound("no such endpoint: "+r.URL.Path))
	})
	return s.harden(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkFraming(w, r); err != nil {
			writeError(w, r, s.logFor(r), err)
			return
		}
		// The buy, most of the traffic, skips the mux's search when its
		// path is one the mux would route to it unchanged (buyPath).
		if sale, ok := buyPath(r); ok {
			x := exchangeOf(w, r)
			if err := s.buyIn(x, sale); err != nil {
				writeErrorTo(x, s.logFor(r), err)
			}
			return
		}
		mux.ServeHTTP(w, r)
	}))
}

// buyPathPrefix and buyPathSuffix frame the sale of a buy's path,
// "/v1/sales/{sale}/orders".
const (
	buyPathPrefix = "/v1/sales/"
	buyPathSuffix = "/orders"
)

// buyPath reports whether r is a POST the mux would hand, as it is, to
// the buy's pattern "/v1/sales/{sale}/orders", and its sale: a path with
// nothing escaped (no RawPath), already clean (no "//", ".", ".." — the
// mux would redirect it), and one non-empty segment between the prefix
// and the suffix. Anything else goes through the mux
// (FuzzBuyPathAgreesWithTheMux checks the two agree).
func buyPath(r *http.Request) (string, bool) {
	if r.URL.RawPath != "" {
		return "", false
	}
	return buyPathOf(r.Method, r.URL.Path)
}

// buyPathOf is buyPath of a method and a path with nothing escaped.
func buyPathOf(method, p string) (string, bool) {
	if method != http.MethodPost {
		return "", false
	}
	return salePathOf(p, buyPathSuffix)
}

// queuePathSuffix ends a buyer's place's path, "/v1/sales/{sale}/queue".
const queuePathSuffix = "/queue"

// queuePathOf is, for a method and a path with nothing escaped, what
// buyPathOf is for the buy: whether the mux would hand the request, as it
// is, to a buyer's place ("/v1/sales/{sale}/queue", POST a join, GET a
// read), and its sale.
func queuePathOf(method, p string) (sale string, join, ok bool) {
	if method != http.MethodPost && method != http.MethodGet {
		return "", false, false
	}
	if sale, ok = salePathOf(p, queuePathSuffix); !ok {
		return "", false, false
	}
	return sale, method == http.MethodPost, true
}

// salePathOf is the sale of a path "/v1/sales/{sale}" + suffix that the mux
// routes as it is: already clean (no "//", ".", ".."), one non-empty
// segment between the prefix and the suffix.
func salePathOf(p, suffix string) (string, bool) {
	if len(p) <= len(buyPathPrefix)+len(suffix) ||
		p[:len(buyPathPrefix)] != buyPathPrefix || p[len(p)-len(suffix):] != suffix {
		return "", false
	}
	sale := p[len(buyPathPrefix) : len(p)-len(suffix)]
	if sale == "." || sale == ".." || strings.IndexByte(sale, '/') >= 0 {
		return "", false
	}
	return sale, true
}

// handler is an endpoint: it writes a success itself and returns any
// failure, which routes answers through the one error table (toAPI).
type handler func(w http.ResponseWriter, r *http.Request) error

// plain adapts a handler that cannot fail.
func plain(h http.HandlerFunc) handler {
	return func(w http.ResponseWriter, r *http.Request) error { h(w, r); return nil }
}

// fail answers with err.
func (s *Service) fail(w http.ResponseWriter, r *http.Request, err error) {
	writeError(w, r, s.logFor(r), err)
}

// ---- sales

type itemJSON struct {
	SKU       string `json:"sku"`
	Remaining int64  `json:"remaining"`
	Stocked   int64  `json:"stocked"`
	Sold      int64  `json:"sold"`
	// AwaitingPayment: of the sold units, those held by orders awaiting
	// payment (a sale with a payment step only)
	AwaitingPayment *int64 `json:"awaiting_payment,omitempty"`
}

type saleJSON struct {
	ID                   string      `json:"id"`
	Status               string      `json:"status"`
	PerUserLimit         int64       `json:"per_user_limit"`
	StartsAt             *time.Time  `json:"starts_at,omitempty"`
	EndsAt               *time.Time  `json:"ends_at,omitempty"`
	RequirePurchaseToken bool        `json:"require_purchase_token"`
	RateLimits           *RateLimits `json:"rate_limits,omitempty"`
	PaymentTimeoutS      int64       `json:"payment_timeout_s,omitempty"`
	Items                []itemJSON  `json:"items"`
	Archived             bool        `json:"archived,omitempty"` // ended, its keys gone from Redis (close.go)
	// Admission: the sale's waiting room as created (room.go)
	Admission *AdmissionSettings `json:"admission,omitempty"`
}

// saleBody is the sale's body as GET /v1/sales/{sale} shows it.
func (s *Service) saleBody(ctx context.Context, id string) (saleJSON, error) {
	v, err := s.Sale(ctx, id)
	if err != nil {
		return saleJSON{}, err
	}
	return saleJSONOf(v), nil
}

// saleJSONOf is the body of a sale's view.
func saleJSONOf(v SaleView) saleJSON {
	st, settings := v.State, v.Settings
	b := saleJSON{ID: st.Sale.ID, Status: string(st.Status), PerUserLimit: st.Sale.PerUserLimit,
		RequirePurchaseToken: settings.RequirePurchaseToken, Items: make([]itemJSON, 0, len(st.Items)), Archived: v.Archived,
		Admission: settings.Admission}
	if settings.RateLimits != (RateLimits{}) {
		b.RateLimits = &settings.RateLimits
	}
	if t := st.Sale.StartsAt; !t.IsZero() {
		b.StartsAt = &t
	}
	if t := st.Sale.EndsAt; !t.IsZero() {
		b.EndsAt = &t
	}
	b.PaymentTimeoutS = int64(st.Sale.PaymentTimeout / time.Second)
	for _, it := range st.Items {
		// An ended sale sells nothing more: what was not sold stays unsold.
		item := itemJSON{SKU: it.SKU, Remaining: it.Remaining, Stocked: it.Stocked, Sold: it.Sold}
		if b.PaymentTimeoutS > 0 {
			item.AwaitingPayment = &it.Awaiting
		}
		b.Items = append(b.Items, item)
	}
	return b
}

// stockInDB is a sale's state as the database has it.
func (s *Service) stockInDB(ctx context.Context, id string) (inventory.SaleState, error) {
	sale, err := s.db.Sale(ctx, id)
	if err != nil {
		return inventory.SaleState{}, err
	}
	totals, err := s.db.Totals(ctx, id)
	if err != nil {
		return inventory.SaleState{}, err
	}
	st := inventory.SaleState{Sale: sale.Sale, Status: inventory.StatusAt(sale.Paused, sale.StartsAt, sale.EndsAt, time.Now())}
	var awaiting map[string]int64
	if sale.PaymentTimeout > 0 {
		if awaiting, err = s.db.AwaitingUnits(ctx, id); err != nil {
			return inventory.SaleState{}, err
		}
	}
	for _, t := range totals {
		it := inventory.ItemState{SKU: t.SKU, Stocked: t.Stocked, Sold: t.Sold, Remaining: -1, Awaiting: awaiting[t.SKU]}
		if t.Stocked != -1 {
			it.Remaining = t.Stocked - t.Sold
		}
		st.Items = append(st.Items, it)
	}
	return st, nil
}

type createSaleRequest struct {
	ID                   *string           `json:"id"`
	PerUserLimit         *int64            `json:"per_user_limit"`
	StartsAt             *string           `json:"starts_at"`
	EndsAt               *string           `json:"ends_at"`
	RequirePurchaseToken *bool             `json:"require_purchase_token"`
	RateLimits           *RateLimits       `json:"rate_limits"`
	PaymentTimeoutS      *int64            `json:"payment_timeout_s"`
	Admission            *admissionRequest `json:"admission"` // room_http.go
	Items                []saleItem        `json:"items"`
}

type saleItem struct {
	SKU      *string `json:"sku"`
	Stock    *int64  `json:"stock"`
	Segments *int64  `json:"segments"` // segments.go
}

// sale reads the request into a sale to create, checked (checkSale).
func (req createSaleRequest) sale() (checkedSale, error) {
	var sale SaleDef
	if req.ID == nil {
		return checkedSale{}, errInvalid("id is required")
	}
	sale.ID, sale.PerUserLimit = *req.ID, 1
	if req.PerUserLimit != nil {
		if *req.PerUserLimit < 1 {
			return checkedSale{}, errInvalid("per_user_limit must be at least 1")
		}
		sale.PerUserLimit = *req.PerUserLimit
	}
	for _, t := range []struct {
		field string
		in    *string
		out   *time.Time
	}{{"starts_at", req.StartsAt, &sale.StartsAt}, {"ends_at", req.EndsAt, &sale.EndsAt}} {
		if t.in == nil {
			continue
		}
		v, err := time.Parse(time.RFC3339, *t.in)
		if err != nil {
			return checkedSale{}, errInvalid(t.field + " must be an RFC 3339 time")
		}
		*t.out = v.UTC()
	}
	if req.RequirePurchaseToken != nil {
		sale.RequirePurchaseToken = *req.RequirePurchaseToken
	}
	if req.RateLimits != nil {
		sale.RateLimits = *req.RateLimits
	}
	if t := req.PaymentTimeoutS; t != nil && *t != 0 {
		if *t < 1 || *t > int64(inventory.MaxPaymentTimeout/time.Second) {
			return checkedSale{}, errInvalid("payment_timeout_s must be between 1 and 86400 (0: no payment step)")
		}
		sale.PaymentTimeout = time.Duration(*t) * time.Second
	}
	if req.Admission != nil {
		a, err := req.Admission.settings()
		if err != nil {
			return checkedSale{}, err
		}
		sale.Admission = &a
	}
	for i, it := range req.Items {
		if it.SKU == nil || it.Stock == nil {
			return checkedSale{}, errInvalid("items[" + itoa(i) + "] needs sku and stock")
		}
		sale.Items = append(sale.Items, inventory.Item{SKU: *it.SKU, Stock: *it.Stock})
		if it.Segments != nil {
			if sale.Segments == nil {
				sale.Segments = make([]int64, len(req.Items))
			}
			sale.Segments[i] = *it.Segments
		}
	}
	checked, err := checkSale(sale)
	if err != nil {
		return checkedSale{}, err
	}
	// A sale's segments given as 0 mean none to the verb; the contract
	// refuses them (after everything else, as when the verb checked none).
	for i, it := range req.Items {
		if it.Segments != nil && *it.Segments == 0 {
			return checkedSale{}, &inventory.InvalidError{Field: "items[" + itoa(i) + "].segments",
				Reason: "must be between 1 and " + itoa(segment.MaxSegments)}
		}
	}
	if req.Admission != nil { // so are a room's numbers given as 0 (but its rate)
		if err := req.Admission.explicitZeros(); err != nil {
			return checkedSale{}, err
		}
	}
	return checked, nil
}

func (s *Service) createSale(w http.ResponseWriter, r *http.Request) error {
	if err := s.auth.operator(r); err != nil {
		return err
	}
	var req createSaleRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	sale, err := req.sale()
	if err != nil {
		return err
	}
	// CreateSale, with the audit once the sale exists (before it is read).
	if err := s.createChecked(r.Context(), sale); err != nil {
		return err
	}
	detail := map[string]any{"items": len(sale.Items), "per_user_limit": sale.PerUserLimit}
	if sale.k > 1 {
		detail["segments"] = sale.k
	}
	if sale.Admission != nil {
		detail["admission"] = true
	}
	s.audit(r, "sale created", sale.ID, "", detail)
	return s.writeSale(w, r, http.StatusCreated, sale.ID, false)
}

// writeSale answers with the sale as GET shows it; ended: as Redis ended
// it (endedView).
func (s *Service) writeSale(w http.ResponseWriter, r *http.Request, status int, id string, ended bool) error {
	view := s.Sale
	if ended {
		view = s.endedView
	}
	v, err := view(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, status, saleJSONOf(v))
	return nil
}

func (s *Service) getSale(w http.ResponseWriter, r *http.Request) error {
	return s.writeSale(w, r, http.StatusOK, r.PathValue("sale"), false)
}

func (s *Service) restock(w http.ResponseWriter, r *http.Request) error {
	if err := s.auth.operator(r); err != nil {
		return err
	}
	var req struct {
		Qty *int64 `json:"qty"`
	}
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if req.Qty == nil {
		return errInvalid("qty is required")
	}
	sale, sku := r.PathValue("sale"), r.PathValue("sku")
	remaining, err := s.Restock(r.Context(), sale, sku, *req.Qty)
	if err != nil {
		return err
	}
	s.audit(r, "restocked", sale, sku, map[string]any{"qty": *req.Qty, "remaining": remaining})
	writeJSON(w, http.StatusOK, map[string]any{"sku": sku, "remaining": remaining})
	return nil
}

func (s *Service) setPaused(paused bool) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		if err := s.auth.operator(r); err != nil {
			return err
		}
		// SetPaused, with the audit before the sale is read.
		id := r.PathValue("sale")
		if err := s.pauseSale(r.Context(), id, paused); err != nil {
			return err
		}
		s.audit(r, map[bool]string{true: "paused", false: "resumed"}[paused], id, "", nil)
		return s.writeSale(w, r, http.StatusOK, id, false)
	}
}

func (s *Service) reconcile(w http.ResponseWriter, r *http.Request) error {
	if err := s.auth.operator(r); err != nil {
		return err
	}
	rep, err := s.Reconcile(r.Context(), r.PathValue("sale"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rep)
	return nil
}

// ---- sale settings the engine does not keep

// The settings cache holds up to maxCachedSales sales, each for
// cachedSettingsTTL: settings never change after a sale is created, so the
// TTL only bounds how long a sale that is gone (its creation undone, say)
// is still served from the cache of another instance. A sale the database
// does not have is remembered too, for missingSaleTTL, so that requests
// naming it do not each ask the database: a sale created on another
// instance is found here that long after at most; one created here, at
// once (CreateSale forgets what was remembered of its id), or as late
// when a look-up begun before the creation ends after it.
const (
	maxCachedSales    = 1 << 14
	cachedSettingsTTL = time.Minute
	missingSaleTTL    = time.Second
)

// settings returns the sale's service-level settings, cached.
func (s *Service) settings(ctx context.Context, saleID string) (saleSettings, error) {
	now := time.Now().UnixNano()
	if v, ok := s.saleCache.Get(saleID, now); ok {
		if v.missing {
			return saleSettings{}, saleNotFound(saleID)
		}
		return v, nil
	}
	sale, err := s.storedSale(ctx, saleID)
	if err != nil {
		if errors.Is(err, inventory.ErrNotFound) {
			s.saleCache.Set(saleID, saleSettings{missing: true}, now+int64(missingSaleTTL), now)
			return saleSettings{}, saleNotFound(saleID)
		}
		return saleSettings{}, err
	}
	own, err := settingsOf(sale)
	if err != nil {
		return saleSettings{}, err
	}
	settings := s.resolve(sale, own)
	s.saleCache.Set(saleID, settings, now+int64(cachedSettingsTTL), now)
	return settings, nil
}

// ---- operations

func (s *Service) ready(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var redisErr, dbErr error
	wg.Add(2)
	go func() { defer wg.Done(); redisErr = s.rdb.Ping(ctx).Err() }()
	go func() { defer wg.Done(); dbErr = s.db.Ping(ctx) }()
	wg.Wait()
	// The contract: ready only when both answer. "sells" says who sells as of
	// the last tick, so that a check can tell an instance that still sells
	// from the database (degraded mode) from one that cannot sell at all.
	sells := "redis"
	if m, redis := s.seller.Sells(); !redis {
		sells = m.Mode
	}
	if redisErr != nil || dbErr != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unavailable",
			"redis": errText(redisErr), "database": errText(dbErr), "sells": sells})
		return nil
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready", "redis": "ok", "database": "ok", "sells": sells})
	return nil
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return "unreachable"
}
