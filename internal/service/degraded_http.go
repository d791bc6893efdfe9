package service

import (
	"context"
	"net/http"
	"time"

	"github.com/seckill/seckill/internal/store"
)

type degradedJSON struct {
	Setting   string         `json:"setting"`
	Mode      string         `json:"mode"`
	Epoch     int64          `json:"epoch"`
	ChangedAt *time.Time     `json:"changed_at,omitempty"`
	SellsFrom *time.Time     `json:"sells_from,omitempty"`
	Reason    string         `json:"reason,omitempty"`
	Instances []instanceJSON `json:"instances"`
}

type instanceJSON struct {
	Name         string     `json:"name"`
	SeenAt       time.Time  `json:"seen_at"`
	RedisOKAt    *time.Time `json:"redis_ok_at,omitempty"`
	FlushedEpoch int64      `json:"flushed_epoch"`
}

func (s *Service) degradedBody(ctx context.Context, m store.SellMode) (degradedJSON, error) {
	b := degradedJSON{Setting: m.Setting, Mode: m.Mode, Epoch: m.Epoch, Reason: m.Reason, Instances: []instanceJSON{}}
	if !m.ChangedAt.IsZero() {
		b.ChangedAt = &m.ChangedAt
	}
	if !m.SellsFrom.IsZero() {
		b.SellsFrom = &m.SellsFrom
	}
	ins, err := s.db.Instances(ctx, time.Now().Add(-time.Minute))
	if err != nil {
		return b, err
	}
	for _, in := range ins {
		j := instanceJSON{Name: in.Name, SeenAt: in.SeenAt, FlushedEpoch: in.FlushedEpoch}
		if !in.RedisOKAt.IsZero() {
			j.RedisOKAt = &in.RedisOKAt
		}
		b.Instances = append(b.Instances, j)
	}
	return b, nil
}

func (s *Service) getDegraded(w http.ResponseWriter, r *http.Request) error {
	if err := s.auth.operator(r); err != nil {
		return err
	}
	m, err := s.db.SellMode(r.Context())
	if err != nil {
		return err
	}
	body, err := s.degradedBody(r.Context(), m)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, body)
	return nil
}

// putDegraded sets the operators' switch: auto, force or off. Every
// instance obeys it from its next tick.
func (s *Service) putDegraded(w http.ResponseWriter, r *http.Request) error {
	if err := s.auth.operator(r); err != nil {
		return err
	}
	var req struct {
		Setting *string `json:"setting"`
	}
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if req.Setting == nil || !store.ValidSetting(*req.Setting) {
		return errInvalid(`setting must be "auto", "force" or "off"`)
	}
	m, err := s.db.SetSetting(r.Context(), *req.Setting)
	if err != nil {
		return err
	}
	s.audit(r, "degraded mode set", "", "", map[string]any{"setting": m.Setting})
	body, err := s.degradedBody(r.Context(), m)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, body)
	return nil
}
