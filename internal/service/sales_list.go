package service

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// GET /v1/sales lists the sales that are not archived (live, upcoming, or
// ended with their keys still in Redis); with archived=true it lists the
// archived ones instead, a page at a time: limit (1..salesPageMax, default
// salesPageDefault) sales after the id after, in the database's order of
// ids, and "next" (the last id of the page) while more may follow. No auth
// is needed, so a list is built at most once per salesListTTL per query and
// instance, by one request while the others wait for it: a crowd of
// clients costs Redis and the database one build a period, whatever their
// number. This instance's own changes to a sale (a create, a close, a
// pause, a restock, an archive) show at once.

const (
	salesPageDefault = 50
	salesPageMax     = 100
	salesListTTL     = time.Second
	// salesListBuildTimeout bounds a build, which outlives the request
	// that began it (others wait for it).
	salesListBuildTimeout = 10 * time.Second
	// salesListKeep bounds the lists kept (each query is one).
	salesListKeep = 64
)

// salesList keeps the lists built lately, by query.
type salesList struct {
	mu    sync.Mutex
	gen   uint64 // changed's count: a list built before a change is not served
	lists map[string]*builtList
}

// builtList is a list being built (done open) or built.
type builtList struct {
	gen  uint64
	at   time.Time
	done chan struct{}
	body []byte
	err  error
}

// changed drops the lists built so far: this instance changed a sale.
func (l *salesList) changed() {
	l.mu.Lock()
	l.gen++
	l.mu.Unlock()
}

// get returns the list of the query key: the one being built, or one
// built within salesListTTL and since the last change, or else a new one,
// built by this call.
func (l *salesList) get(ctx context.Context, key string, build func(context.Context) ([]byte, error)) ([]byte, error) {
	l.mu.Lock()
	b := l.lists[key]
	if b != nil && b.gen == l.gen && (b.at.IsZero() || b.err == nil && time.Since(b.at) < salesListTTL) {
		l.mu.Unlock()
		select {
		case <-b.done:
			return b.body, b.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	b = &builtList{gen: l.gen, done: make(chan struct{})}
	l.keep(key, b)
	l.mu.Unlock()
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), salesListBuildTimeout)
	body, err := build(bctx)
	cancel()
	l.mu.Lock()
	b.body, b.err, b.at = body, err, time.Now()
	l.mu.Unlock()
	close(b.done)
	return body, err
}

// keep files b under key, the lists no longer served dropped first if
// salesListKeep are kept; if they all still are, b is not kept (l.mu held).
func (l *salesList) keep(key string, b *builtList) {
	if l.lists == nil {
		l.lists = map[string]*builtList{}
	}
	if _, ok := l.lists[key]; !ok && len(l.lists) >= salesListKeep {
		for k, old := range l.lists {
			if !old.at.IsZero() && (old.gen != l.gen || time.Since(old.at) >= salesListTTL) {
				delete(l.lists, k)
			}
		}
	}
	if _, ok := l.lists[key]; ok || len(l.lists) < salesListKeep {
		l.lists[key] = b
	}
}

// listSales answers GET /v1/sales.
func (s *Service) listSales(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	archived := false
	switch q.Get("archived") {
	case "", "false":
	case "true":
		archived = true
	default:
		return errInvalid("archived must be true or false")
	}
	after, limit := q.Get("after"), salesPageDefault
	if !archived && (q.Has("after") || q.Has("limit")) {
		return errInvalid("after and limit page the archived sales: add archived=true")
	}
	if after != "" && !inventory.ValidID(after) {
		return errInvalid("after must be a sale id")
	}
	if q.Has("limit") {
		n, err := strconv.Atoi(q.Get("limit"))
		if err != nil || n < 1 || n > salesPageMax {
			return errInvalid("limit must be between 1 and " + strconv.Itoa(salesPageMax))
		}
		limit = n
	}
	build := s.buildLiveSales
	key := "live"
	if archived {
		key = "archived|" + strconv.Itoa(limit) + "|" + after
		build = func(ctx context.Context) ([]byte, error) { return s.buildArchivedSales(ctx, after, limit) }
	}
	body, err := s.salesList.get(r.Context(), key, build)
	if err != nil {
		return err
	}
	jsonHeaders(w.Header())
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
	return nil
}

// buildLiveSales is the list of the sales not archived: each as GET
// /v1/sales/{sale} shows it, a segmented sale once, under its id.
func (s *Service) buildLiveSales(ctx context.Context) ([]byte, error) {
	ends, err := s.db.SaleEnds(ctx) // the sales not archived
	if err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	for id := range ends {
		parent, err := s.router.Parent(ctx, id)
		if err != nil {
			return nil, err
		}
		if parent != "" {
			id = parent
		}
		ids[id] = true
	}
	out := make([]saleJSON, 0, len(ids))
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		if body, err := s.saleBody(ctx, id); err == nil {
			out = append(out, body)
		}
	}
	return json.Marshal(map[string]any{"sales": out})
}

// buildArchivedSales is a page of the archived sales: up to limit after
// the id after, and the id to ask the next page after when more may follow.
func (s *Service) buildArchivedSales(ctx context.Context, after string, limit int) ([]byte, error) {
	ids, err := s.db.ArchivedSales(ctx, after, limit+1)
	if err != nil {
		return nil, err
	}
	page := map[string]any{}
	if len(ids) > limit {
		ids = ids[:limit]
		page["next"] = ids[limit-1]
	}
	out := make([]saleJSON, 0, len(ids))
	for _, id := range ids {
		v, err := s.archivedSaleView(ctx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, saleJSONOf(v))
	}
	page["sales"] = out
	return json.Marshal(page)
}
