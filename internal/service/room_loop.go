package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill/internal/admission"
	"github.com/seckill/seckill/internal/inventory"
)

// The rooms' loop: on every instance, every roomTick, each live room is
// stepped (admission.Rooms.Step: lapses, then admissions as far as the
// rate and the stock allow). Any number of instances may step a room at
// once: each step is one script. The rooms are the sales with a room that
// are not archiving, listed from the database every roomListEvery; a list
// of none costs that one query.
//
// A room whose draw is due (Step's NeedsDraw) is drawn by whichever
// instance sees it: its entrants from Redis, the secret from the database,
// the record saved in the database (the first saved wins: every instance
// draws the same record from the same entrants and secret), then the
// order written to Redis (idempotent). A room Redis lost while its sale
// lives is made again (remakeRoom). While Redis does not sell (degraded
// mode, or a Redis being repaired) nothing is stepped: nobody is admitted.

const (
	roomTick      = 20 * time.Millisecond
	roomListEvery = time.Second
	// roomRetryEvery is the least time between two attempts to remake
	// a sale's room, or to draw it after a failure, and between two log
	// lines of a room's failing steps.
	roomRetryEvery = time.Second
)

// roomRunner is the loop's state: only the loop's goroutine touches it,
// but for the drawing set, which the draws' goroutines clear.
type roomRunner struct {
	s       *Service
	drawing sync.Map             // sale id -> struct{}: a draw under way here
	retry   map[string]time.Time // sale id -> when it may be retried (remake, draw) or logged again
}

func (s *Service) roomLoop(ctx context.Context) {
	r := &roomRunner{s: s, retry: map[string]time.Time{}}
	t := time.NewTicker(roomTick)
	defer t.Stop()
	var sales []string
	var listed time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !s.seller.RedisSells() {
			continue
		}
		if now := time.Now(); now.Sub(listed) >= roomListEvery {
			listed = now
			ids, err := s.db.RoomSales(ctx)
			if err != nil {
				s.log.Warn("list the sales with a waiting room", "err", err)
			} else {
				sales = ids
			}
			s.roomStats.sample(ctx, s, sales, now)
		}
		for _, id := range sales {
			r.step(ctx, id)
		}
	}
}

// step steps one room, and draws it or makes it again when it says so.
func (r *roomRunner) step(ctx context.Context, saleID string) {
	res, err := r.s.rooms.Step(ctx, saleID)
	now := time.Now()
	switch {
	case errors.Is(err, admission.ErrNoRoom):
		if !r.due(saleID, now) {
			return
		}
		settings, err := r.s.settings(ctx, saleID)
		if err == nil && settings.Admission != nil {
			err = r.s.remakeRoom(ctx, settings)
		}
		if _, archived := errors.AsType[*inventory.ArchivedError](err); err != nil && !archived {
			r.s.log.Warn("make a waiting room again", "sale", saleID, "err", err)
		}
	case err != nil:
		if r.due(saleID, now) {
			r.s.log.Warn("step a waiting room", "sale", saleID, "err", err)
		}
	case res.NeedsDraw:
		if _, busy := r.drawing.LoadOrStore(saleID, struct{}{}); busy {
			return
		}
		if !r.due(saleID, now) {
			r.drawing.Delete(saleID)
			return
		}
		r.s.bg.Add(1)
		go func() {
			defer r.s.bg.Done()
			defer r.drawing.Delete(saleID)
			if err := r.s.drawRoom(ctx, saleID); err != nil {
				r.s.log.Error("draw a waiting room", "sale", saleID, "err", err)
			}
		}()
	}
}

// due reports whether the sale may be retried (or logged) now, and if so
// holds the next retry back roomRetryEvery.
func (r *roomRunner) due(saleID string, now time.Time) bool {
	if now.Before(r.retry[saleID]) {
		return false
	}
	r.retry[saleID] = now.Add(roomRetryEvery)
	return true
}

// drawRoom runs the draw of a sealed room: RunDraw over its entrants with
// its secret, the record saved in the database (or the one saved there
// already: every instance draws the same), then its order written to
// Redis. A room with no draw to write is left as it is.
func (s *Service) drawRoom(ctx context.Context, saleID string) error {
	users, due, err := s.rooms.Entrants(ctx, saleID)
	if err != nil || !due {
		return err
	}
	room, err := s.db.Room(ctx, saleID)
	if err != nil {
		return err
	}
	record := room.Draw
	if record == nil {
		d, err := admission.RunDraw(saleID, room.Secret, users)
		if err != nil {
			return err
		}
		raw, err := json.Marshal(d)
		if err != nil {
			return err
		}
		if record, err = s.db.SaveDraw(ctx, saleID, raw, time.Now()); err != nil {
			return err
		}
	}
	var d admission.Draw
	if err := json.Unmarshal(record, &d); err != nil {
		return fmt.Errorf("the saved draw of sale %s: %w", saleID, err)
	}
	if len(users) == 0 && len(d.Order) > 0 {
		// A room Redis lost after its draw was saved, made again: its
		// places were lost, it has no entrant to put in the saved order
		// (which stays the published one); its draw is done, empty.
		d.Order = nil
	}
	byEntry := make(map[string]string, len(users))
	for _, u := range users {
		byEntry[admission.Entry(saleID, u)] = u
	}
	if len(d.Order) != len(users) {
		return fmt.Errorf("the saved draw of sale %s has %d entries, the room %d entrants", saleID, len(d.Order), len(users))
	}
	order := make([]string, len(d.Order))
	for i, e := range d.Order {
		u, ok := byEntry[e]
		if !ok {
			return fmt.Errorf("the saved draw of sale %s has an entry of no entrant of the room: %s", saleID, e)
		}
		order[i] = u
	}
	if err := s.rooms.WriteDraw(ctx, saleID, order); err != nil {
		return err
	}
	s.draws.Delete(saleID) // the commitment alone, maybe
	s.log.Info("drew a waiting room", "sale", saleID, "entrants", len(users))
	return nil
}

// roomStats are the rooms' counts as the loop last sampled them (once a
// roomListEvery), for the metrics: a scrape costs no Redis call.
type roomStats struct {
	mu     sync.Mutex
	bySale map[string]roomSample
}

// roomSample is one room's counts, and its admissions per second since
// the sample before (hasRate: there was one).
type roomSample struct {
	admission.Stats
	at      time.Time
	rate    float64
	hasRate bool
}

// sample reads the counts of the sales' rooms; the rooms of other sales
// are forgotten.
func (st *roomStats) sample(ctx context.Context, s *Service, sales []string, now time.Time) {
	next := make(map[string]roomSample, len(sales))
	for _, id := range sales {
		stats, err := s.rooms.Stats(ctx, id)
		if err != nil {
			continue
		}
		smp := roomSample{Stats: stats, at: now}
		st.mu.Lock()
		prev, ok := st.bySale[id]
		st.mu.Unlock()
		if dt := now.Sub(prev.at).Seconds(); ok && dt > 0 && stats.Admitted >= prev.Admitted {
			smp.rate, smp.hasRate = float64(stats.Admitted-prev.Admitted)/dt, true
		}
		next[id] = smp
	}
	st.mu.Lock()
	st.bySale = next
	st.mu.Unlock()
}

// snapshot is a copy of the samples.
func (st *roomStats) snapshot() map[string]roomSample {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make(map[string]roomSample, len(st.bySale))
	for id, smp := range st.bySale {
		out[id] = smp
	}
	return out
}

// roomCollector exports the rooms' samples.
type roomCollector struct{ st *roomStats }

var (
	descRoomWaiting  = prometheus.NewDesc("seckill_room_waiting", "Buyers in line in the sale's waiting room (drawn or arrived after the draw), not admitted yet.", []string{"sale"}, nil)
	descRoomDrawing  = prometheus.NewDesc("seckill_room_drawing", "Buyers who joined the sale's waiting room before its draw, while the draw has not run.", []string{"sale"}, nil)
	descRoomAdmitted = prometheus.NewDesc("seckill_room_admitted", "Admissions the sale's waiting room granted since it opened.", []string{"sale"}, nil)
	descRoomUsed     = prometheus.NewDesc("seckill_room_used", "Admissions of the sale's waiting room that bought an order, since it opened.", []string{"sale"}, nil)
	descRoomLapsed   = prometheus.NewDesc("seckill_room_lapsed", "Admissions of the sale's waiting room that lapsed unused, since it opened.", []string{"sale"}, nil)
	descRoomLive     = prometheus.NewDesc("seckill_room_live_admissions", "Unused admissions of the sale's waiting room out now.", []string{"sale"}, nil)
	descRoomRate     = prometheus.NewDesc("seckill_room_admission_rate", "Admissions per second of the sale's waiting room over the last sample period (about a second).", []string{"sale"}, nil)
	descRoomWait     = prometheus.NewDesc("seckill_room_wait_seconds",
		"Estimated wait of a buyer joining the back of the sale's line now: waiting ÷ the admission rate; absent while nobody is admitted.", []string{"sale"}, nil)
)

func (c roomCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRoomWaiting, descRoomDrawing, descRoomAdmitted, descRoomUsed, descRoomLapsed,
		descRoomLive, descRoomRate, descRoomWait} {
		ch <- d
	}
}

func (c roomCollector) Collect(ch chan<- prometheus.Metric) {
	for id, smp := range c.st.snapshot() {
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, id)
		}
		gauge(descRoomWaiting, float64(smp.Waiting))
		gauge(descRoomDrawing, float64(smp.Drawing))
		gauge(descRoomAdmitted, float64(smp.Admitted))
		gauge(descRoomUsed, float64(smp.Used))
		gauge(descRoomLapsed, float64(smp.Lapsed))
		gauge(descRoomLive, float64(smp.Live))
		if smp.hasRate {
			gauge(descRoomRate, smp.rate)
			if smp.rate > 0 {
				gauge(descRoomWait, float64(smp.Waiting)/smp.rate)
			}
		}
	}
}
