package cost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The room's buyers over HTTP, outside the measured loads: a probe that the
// service has rooms, and the admissions an admitted-buy load spends.

// probeRoom joins one buyer of its own to sale's room and reads its place:
// the service has rooms if both answer a place.
func (r *round) probeRoom(ctx context.Context, sale string) error {
	token, err := signBuyer(r.env.secret, "room-probe")
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	for _, method := range []string{http.MethodPost, http.MethodGet} {
		if _, err := readPlace(ctx, client, method, r.queueURL(sale), token); err != nil {
			return err
		}
	}
	return nil
}

// place is what the run reads of a buyer's place.
type place struct {
	Status    string `json:"status"`
	Admission string `json:"admission"`
}

// errPlaceLater is a place read refused for now (429): read it again later.
var errPlaceLater = errors.New("place read refused for now (429)")

// readPlace joins (POST) or reads (GET) the place of the buyer of token.
// A reply that shows the service has no rooms is ErrNoRooms.
func readPlace(ctx context.Context, client *http.Client, method, url, token string) (place, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return place{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return place{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return place{}, err
	}
	var pl place
	switch {
	case resp.StatusCode == http.StatusTooManyRequests && method == http.MethodGet:
		return place{}, errPlaceLater
	case resp.StatusCode == http.StatusNotFound && method == http.MethodPost,
		resp.StatusCode == http.StatusMethodNotAllowed,
		resp.StatusCode == http.StatusConflict && strings.Contains(string(body), "admission_not_enabled"):
		return place{}, fmt.Errorf("%w: %s %s: %d %s", ErrNoRooms, method, url, resp.StatusCode, body)
	case resp.StatusCode != http.StatusOK:
		return place{}, fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, body)
	case json.Unmarshal(body, &pl) != nil || pl.Status == "":
		return place{}, fmt.Errorf("%w: %s %s: 200 without a place: %.200s", ErrNoRooms, method, url, body)
	}
	return pl, nil
}

// admit joins buyers to sale's room (which admits at once) and waits until
// each holds an admission; it returns the admissions, in buyers' order.
func (r *round) admit(ctx context.Context, sale string, buyers []string) ([]string, error) {
	client := &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: admitConns, MaxConnsPerHost: admitConns}}
	defer client.CloseIdleConnections()
	url := r.queueURL(sale)
	admissions := make([]string, len(buyers))
	visit := func(method string, i int) error {
		pl, err := readPlace(ctx, client, method, url, buyers[i])
		switch {
		case errors.Is(err, errPlaceLater):
			return nil
		case err != nil:
			return err
		case pl.Status == "admitted" && pl.Admission != "":
			admissions[i] = pl.Admission
		case pl.Status != "waiting" && pl.Status != "drawing" && pl.Status != "admitted":
			return fmt.Errorf("buyer %d of %s is %q, not waiting for an admission", i+1, sale, pl.Status)
		}
		return nil
	}
	// A join's reply may be the admission already.
	all := make([]int, len(buyers))
	for i := range all {
		all[i] = i
	}
	if err := parallel(ctx, all, func(i int) error { return visit(http.MethodPost, i) }); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(admitWait); ; {
		var pending []int
		for i, a := range admissions {
			if a == "" {
				pending = append(pending, i)
			}
		}
		if len(pending) == 0 {
			return admissions, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d buyers of %s not admitted %v after they joined", len(pending), len(buyers), sale, admitWait)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if err := parallel(ctx, pending, func(i int) error { return visit(http.MethodGet, i) }); err != nil {
			return nil, err
		}
	}
}

// parallel calls f for each of items from admitConns goroutines, and
// returns the first error (the others stop taking items then).
func parallel(ctx context.Context, items []int, f func(int) error) error {
	var next atomic.Int64
	var once sync.Once
	var first error
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range min(admitConns, len(items)) {
		wg.Go(func() {
			for ctx.Err() == nil && !failed.Load() {
				k := int(next.Add(1) - 1)
				if k >= len(items) {
					return
				}
				if err := f(items[k]); err != nil {
					once.Do(func() { first = err })
					failed.Store(true)
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}
