package service

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
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
// number. Every distinct page of archived sales is a query of its own, so
// an instance builds one archived page at a time: a client varying after
// costs the database one build at a time, however many requests it sends,
// and each request waits for its turn only as long as its client does.
// This instance's own changes to a sale (a create, a close, a pause, a
// restock, an archive) show at once.

const (
	salesPageDefault = 50
	salesPageMax     = 100
	salesListTTL     = time.Second
	// salesListBuildTimeout bounds a build, which outlives the request
	// that began it (others wait for it).
	salesListBuildTimeout = 10 * time.Second
	// salesListKeep bounds the lists built that are kept (each query is
	// one); the lists being built, or waiting for their turn, are kept
	// besides.
	salesListKeep = 64
)

// salesList keeps the lists built lately, by query.
type salesList struct {
	mu    sync.Mutex
	gen   uint64 // changed's count: a list built before a change is not served
	lists map[string]*builtList
	turn  chan struct{} // held by the archived page being built (made on first use)

	waiting atomic.Int64                         // requests waiting for a list another builds, or for their turn
	onBuild atomic.Pointer[func(string, func())] // tests: wraps each build, with its query key
}

// builtList is a list being built (done open) or built.
type builtList struct {
	gen  uint64
	at   time.Time
	done chan struct{}
	body []byte
	err  error
}

// errLeft is the list of a request that left while it waited for its turn
// to build it: whoever waited for that list builds it anew.
var errLeft = errors.New("service: the request building the list left")

// changed drops the lists built so far: this instance changed a sale.
func (l *salesList) changed() {
	l.mu.Lock()
	l.gen++
	l.mu.Unlock()
}

// get returns the list of the query key: the one being built, or one
// built within salesListTTL and since the last change, or else a new one,
// built by this call. With oneAtATime (an archived page), the build waits
// for its turn first: one such build runs at a time. A request waits, for
// its turn or for a list another request builds, as long as ctx lasts.
func (l *salesList) get(ctx context.Context, key string, oneAtATime bool, build func(context.Context) ([]byte, error)) ([]byte, error) {
	for {
		l.mu.Lock()
		b := l.lists[key]
		if b != nil && b.gen == l.gen && (b.at.IsZero() || b.err == nil && time.Since(b.at) < salesListTTL) {
			l.mu.Unlock()
			body, err := l.wait(ctx, b)
			if errors.Is(err, errLeft) {
				continue // its builder left before its turn
			}
			return body, err
		}
		b = &builtList{gen: l.gen, done: make(chan struct{})}
		l.keep(key, b)
		var turn chan struct{}
		if oneAtATime {
			if l.turn == nil {
				l.turn = make(chan struct{}, 1)
			}
			turn = l.turn
		}
		l.mu.Unlock()
		if turn != nil {
			if err := l.take(ctx, turn); err != nil {
				l.finish(key, b, nil, errLeft)
				return nil, err
			}
		}
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), salesListBuildTimeout)
		var body []byte
		var err error
		run := func() { body, err = build(bctx) }
		if h := l.onBuild.Load(); h != nil {
			(*h)(key, run)
		} else {
			run()
		}
		cancel()
		if turn != nil {
			<-turn
		}
		l.finish(key, b, body, err)
		return body, err
	}
}

// wait waits for b, built by another request, as long as ctx lasts.
func (l *salesList) wait(ctx context.Context, b *builtList) ([]byte, error) {
	l.waiting.Add(1)
	defer l.waiting.Add(-1)
	select {
	case <-b.done:
		return b.body, b.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// take waits for turn, as long as ctx lasts.
func (l *salesList) take(ctx context.Context, turn chan struct{}) error {
	l.waiting.Add(1)
	defer l.waiting.Add(-1)
	select {
	case turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// finish ends b, the list of key: built (body, err), or left (errLeft),
// which is then no longer kept.
func (l *salesList) finish(key string, b *builtList, body []byte, err error) {
	l.mu.Lock()
	b.body, b.err, b.at = body, err, time.Now()
	if errors.Is(err, errLeft) && l.lists[key] == b {
		delete(l.lists, key)
	}
	l.mu.Unlock()
	close(b.done)
}

// keep files b under key (l.mu held). When salesListKeep lists built are
// kept, the ones no longer served are dropped first, then the oldest: a
// list being built, or waiting for its turn, is always kept, so that a
// request for the same query waits for it instead of building it again.
func (l *salesList) keep(key string, b *builtList) {
	if l.lists == nil {
		l.lists = map[string]*builtList{}
	}
	delete(l.lists, key)
	if len(l.lists) >= salesListKeep {
		built, oldest := 0, ""
		for k, old := range l.lists {
			switch {
			case old.at.IsZero():
			case old.gen != l.gen || time.Since(old.at) >= salesListTTL:
				delete(l.lists, k)
			default:
				built++
				if oldest == "" || old.at.Before(l.lists[oldest].at) {
					oldest = k
				}
			}
		}
		if built >= salesListKeep {
			delete(l.lists, oldest)
		}
	}
	l.lists[key] = b
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
	build, key := s.buildLiveSales, "live"
	if archived {
		key = "archived|" + strconv.Itoa(limit) + "|" + after
		build = func(ctx context.Context) ([]byte, error) { return s.buildArchivedSales(ctx, after, limit) }
	}
	body, err := s.salesList.get(r.Context(), key, archived, build)
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
