package service

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/seckill/seckill/internal/admission"
	"github.com/seckill/seckill/internal/inventory"
)

// The rooms' routes (room.go has the verbs).

// admissionRequest is the "admission" object of POST /v1/admin/sales.
type admissionRequest struct {
	OpensAt      *string `json:"opens_at"`
	DrawUntil    *string `json:"draw_until"`
	RatePerS     *int64  `json:"rate_per_s"`
	CapacityPerS *int64  `json:"capacity_per_s"`
	AdmitTTLS    *int64  `json:"admit_ttl_s"`
	MaxWaiting   *int64  `json:"max_waiting"`
}

// settings is the room as given, each field absent left zero (its
// default, resolveAdmission).
func (a admissionRequest) settings() (AdmissionSettings, error) {
	var out AdmissionSettings
	for _, t := range []struct {
		field string
		in    *string
		out   *time.Time
	}{{"opens_at", a.OpensAt, &out.OpensAt}, {"draw_until", a.DrawUntil, &out.DrawUntil}} {
		if t.in == nil {
			continue
		}
		v, err := time.Parse(time.RFC3339, *t.in)
		if err != nil {
			return AdmissionSettings{}, errInvalid("admission." + t.field + " must be an RFC 3339 time")
		}
		*t.out = v
	}
	for _, n := range []struct {
		in  *int64
		out *int64
	}{{a.RatePerS, &out.RatePerS}, {a.CapacityPerS, &out.CapacityPerS}, {a.AdmitTTLS, &out.AdmitTTLS}, {a.MaxWaiting, &out.MaxWaiting}} {
		if n.in != nil {
			*n.out = *n.in
		}
	}
	return out, nil
}

// explicitZeros refuses the fields given as 0: to the verb a zero is the
// default, to the contract out of range (rate_per_s 0, automatic, is in
// range).
func (a admissionRequest) explicitZeros() error {
	for _, n := range []struct {
		field, reason string
		in            *int64
	}{{"capacity_per_s", reasonCapacity, a.CapacityPerS}, {"admit_ttl_s", reasonAdmitTTL, a.AdmitTTLS}, {"max_waiting", reasonMaxWaiting, a.MaxWaiting}} {
		if n.in != nil && *n.in == 0 {
			return &inventory.InvalidError{Field: "admission." + n.field, Reason: n.reason}
		}
	}
	return nil
}

// placeJSON is a buyer's place as the queue's routes show it.
type placeJSON struct {
	SaleID        string          `json:"sale_id"`
	Status        string          `json:"status"`
	Position      *int64          `json:"position,omitempty"`
	Ahead         *int64          `json:"ahead,omitempty"`
	EtaS          json.RawMessage `json:"eta_s,omitempty"` // while waiting: seconds, or null
	PollAfterMs   int64           `json:"poll_after_ms"`
	JoinedAt      time.Time       `json:"joined_at"`
	InDraw        bool            `json:"in_draw"`
	Admission     string          `json:"admission,omitempty"`
	AdmittedUntil *time.Time      `json:"admitted_until,omitempty"`
	OrderID       string          `json:"order_id,omitempty"`
}

func placeJSONOf(p Place) placeJSON {
	out := placeJSON{SaleID: p.SaleID, Status: string(p.Status), PollAfterMs: p.PollAfter.Milliseconds(),
		JoinedAt: p.JoinedAt.UTC(), InDraw: p.InDraw}
	switch p.Status {
	case admission.Waiting:
		out.Position, out.Ahead = &p.Position, &p.Ahead
		out.EtaS = json.RawMessage("null")
		if p.HasETA {
			out.EtaS, _ = json.Marshal(int64(p.ETA / time.Second))
		}
	case admission.Admitted:
		until := p.AdmittedUntil.UTC()
		out.Admission, out.AdmittedUntil = p.Admission, &until
	case admission.Used:
		out.OrderID = p.OrderID
	}
	return out
}

// joinQueue is POST /v1/sales/{sale}/queue over net/http's mux.
func (s *Service) joinQueue(w http.ResponseWriter, r *http.Request) error {
	return s.queueIn(exchangeOf(w, r), r.PathValue("sale"), true)
}

// getPlace is GET /v1/sales/{sale}/queue over net/http's mux.
func (s *Service) getPlace(w http.ResponseWriter, r *http.Request) error {
	return s.queueIn(exchangeOf(w, r), r.PathValue("sale"), false)
}

// queueIn is POST (join) or GET /v1/sales/{sale}/queue of the sale saleID
// (the path's, found by the mux or by fasthttp's route in fast.go): the
// one place route of every server, as buyIn is the buy's. It writes the
// place as writeJSON would, newline included.
func (s *Service) queueIn(x exchange, saleID string, join bool) error {
	authorization, _ := x.header("Authorization")
	user, err := s.auth.buyerOf(authorization)
	if err != nil {
		return err
	}
	p, err := s.queuePlace(x.ctx(), saleID, user, join)
	if err != nil {
		return err
	}
	x.replyJSON(http.StatusOK, placeBody(placeJSONOf(p)))
	return nil
}

// placeBody is p as json.Encoder writes it, newline included: appendPlace's
// bytes, or encoding/json's where a string or a time needs what only it
// does.
func placeBody(p placeJSON) []byte {
	if b, ok := appendPlace(make([]byte, 0, 256), p); ok {
		return b
	}
	b, _ := json.Marshal(p) // strings, numbers and times: cannot fail
	return append(b, '\n')
}

// appendPlace appends p as json.Encoder writes it, newline included; ok
// is false if a string or a time needs what only encoding/json does
// (escapes, a year beyond 9999).
func appendPlace(b []byte, p placeJSON) ([]byte, bool) {
	ok := true
	str := func(key, v string) {
		if !plainJSON(v) {
			ok = false
		}
		b = append(b, key...)
		b = append(b, '"')
		b = append(b, v...)
		b = append(b, '"')
	}
	tm := func(key string, t time.Time) {
		if y := t.Year(); y < 0 || y > 9999 {
			ok = false
		}
		if _, off := t.Zone(); off <= -24*3600 || off >= 24*3600 {
			ok = false
		}
		b = append(b, key...)
		b = append(b, '"')
		b = t.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	str(`{"sale_id":`, p.SaleID)
	str(`,"status":`, p.Status)
	if p.Position != nil {
		b = strconv.AppendInt(append(b, `,"position":`...), *p.Position, 10)
	}
	if p.Ahead != nil {
		b = strconv.AppendInt(append(b, `,"ahead":`...), *p.Ahead, 10)
	}
	if len(p.EtaS) > 0 {
		b = append(append(b, `,"eta_s":`...), p.EtaS...)
	}
	b = strconv.AppendInt(append(b, `,"poll_after_ms":`...), p.PollAfterMs, 10)
	tm(`,"joined_at":`, p.JoinedAt)
	b = strconv.AppendBool(append(b, `,"in_draw":`...), p.InDraw)
	if p.Admission != "" {
		str(`,"admission":`, p.Admission)
	}
	if p.AdmittedUntil != nil {
		tm(`,"admitted_until":`, *p.AdmittedUntil)
	}
	if p.OrderID != "" {
		str(`,"order_id":`, p.OrderID)
	}
	return append(b, "}\n"...), ok
}

// getDraw is GET /v1/sales/{sale}/queue/draw: the draw's record as the
// database keeps it (the commitment alone before the draw).
func (s *Service) getDraw(w http.ResponseWriter, r *http.Request) error {
	raw, err := s.drawRecord(r.Context(), r.PathValue("sale"))
	if err != nil {
		return err
	}
	jsonHeaders(w.Header())
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(raw)
	return nil
}

// queueStatsJSON is a room's counts as the operators' route shows them.
type queueStatsJSON struct {
	Waiting  int64 `json:"waiting"`
	Drawing  int64 `json:"drawing"`
	Admitted int64 `json:"admitted"`
	Used     int64 `json:"used"`
	Lapsed   int64 `json:"lapsed"`
	RatePerS int64 `json:"rate_per_s"`
	DrawSize int64 `json:"draw_size"`
	// Live: unused admissions out now.
	Live int64 `json:"live"`
}

func queueStatsJSONOf(st admission.Stats) queueStatsJSON {
	return queueStatsJSON{Waiting: st.Waiting, Drawing: st.Drawing, Admitted: st.Admitted, Used: st.Used, Lapsed: st.Lapsed,
		RatePerS: st.RatePerS, DrawSize: st.DrawSize, Live: st.Live}
}

// getQueueStats is GET /v1/admin/sales/{sale}/queue.
func (s *Service) getQueueStats(w http.ResponseWriter, r *http.Request) error {
	if err := s.auth.operator(r); err != nil {
		return err
	}
	st, err := s.queueStats(r.Context(), r.PathValue("sale"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, queueStatsJSONOf(st))
	return nil
}

// setQueueRate is POST /v1/admin/sales/{sale}/queue/rate.
func (s *Service) setQueueRate(w http.ResponseWriter, r *http.Request) error {
	if err := s.auth.operator(r); err != nil {
		return err
	}
	var req struct {
		RatePerS *int64 `json:"rate_per_s"`
	}
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if req.RatePerS == nil {
		return errInvalid("rate_per_s is required")
	}
	sale := r.PathValue("sale")
	st, err := s.setAdmissionRate(r.Context(), sale, *req.RatePerS)
	if err != nil {
		return err
	}
	s.audit(r, "admission rate set", sale, "", map[string]any{"rate_per_s": *req.RatePerS})
	writeJSON(w, http.StatusOK, queueStatsJSONOf(st))
	return nil
}
