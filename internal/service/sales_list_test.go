package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/waitfor"
)

// TestArchivedPagesAreBuiltOneAtATime: GET /v1/sales?archived=true needs no
// auth, and every distinct page (limit, after) is a build of its own, so a
// client varying after could make the database build pages without
// bound, all at once. Each instance builds one archived page at a time;
// the other requests wait for their turn, or for the identical page being
// built (one build each), as long as their client waits: one that leaves
// stops waiting, and a request for the same page takes its place. Every
// request is answered with its page all the same.
func TestArchivedPagesAreBuiltOneAtATime(t *testing.T) {
	cfg := stacks[0].start(t)
	cfg.SampleEvery, cfg.ArchiveEvery = -1, 20*time.Millisecond
	a := startApp(t, cfg)
	var ids []string
	for i := range 7 {
		id := fmt.Sprintf("p%02d", i)
		ids = append(ids, id)
		a.createSale(id, 1, "A", 5)
		mustStatus(t, a.admin("POST", "/v1/admin/sales/"+id+"/close", nil), http.StatusOK)
	}
	a.waitArchived(ids...)

	var building, most, builds atomic.Int64
	release := make(chan struct{})
	var releaseOnce sync.Once
	open := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(open) // before the service's shutdown, which waits for the requests
	a.svc.OnSalesListBuild(func(key string, build func()) {
		builds.Add(1)
		n := building.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release // the first build is held until the test has seen the others wait
		build()
		building.Add(-1)
	})

	type answer struct {
		after string
		page  []string
		next  string
		err   error
	}
	answers := make(chan answer, 20)
	ask := func(ctx context.Context, after string) {
		ans := answer{after: after}
		defer func() { answers <- ans }()
		req, err := http.NewRequestWithContext(ctx, "GET", a.svc.URL()+"/v1/sales?archived=true&limit=1&after="+after, nil)
		if err != nil {
			ans.err = err
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			ans.err = err
			return
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var body struct {
			Sales []struct{ ID string }
			Next  string
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &body) != nil {
			ans.err = fmt.Errorf("%d %s", resp.StatusCode, raw)
			return
		}
		for _, s := range body.Sales {
			ans.page = append(ans.page, s.ID)
		}
		ans.next = body.Next
	}
	waiting := func(n int) func() error {
		return func() error {
			if b, w := building.Load(), a.svc.SalesListWaiting(); b != 1 || w != n {
				return fmt.Errorf("%d archived pages being built, %d requests waiting; want 1 and %d", b, w, n)
			}
			return nil
		}
	}

	// Each of six pages asked twice at once.
	afters := []string{"", "p00", "p01", "p02", "p03", "p04"}
	asked := 0
	for _, after := range afters {
		for range 2 {
			go ask(a.ctx, after)
			asked++
		}
	}
	waitfor.Until(t, waitfor.Patience, "one page being built, the other requests waiting", func() error {
		if most.Load() > 1 {
			return nil // fails below
		}
		return waiting(asked - 1)()
	})
	if m := most.Load(); m > 1 {
		t.Fatalf("%d archived pages built at once, want 1", m)
	}
	// A request for a seventh page leaves while it waits for its turn; one
	// for the same page, waiting for it, takes its turn.
	leave, leaving := context.WithCancel(a.ctx)
	go ask(leave, "p05")
	waitfor.Until(t, waitfor.Patience, "the leaving request waiting", waiting(asked))
	go ask(a.ctx, "p05")
	asked += 2
	waitfor.Until(t, waitfor.Patience, "its twin waiting for it", waiting(asked-1))
	leaving()
	waitfor.Until(t, waitfor.Patience, "the twin waiting in its place", waiting(asked-2))
	open()

	for range asked {
		ans := <-answers
		want := []string{ids[0]}
		if ans.after != "" {
			want = []string{ids[slices.Index(ids, ans.after)+1]}
		}
		wantNext := want[0]
		if want[0] == ids[len(ids)-1] {
			wantNext = ""
		}
		switch {
		case ans.err != nil && ans.after == "p05" && errors.Is(ans.err, context.Canceled): // the request that left
		case ans.err != nil:
			t.Errorf("after %q: %v", ans.after, ans.err)
		case !slices.Equal(ans.page, want) || ans.next != wantNext:
			t.Errorf("after %q: page %v next %q, want %v next %q", ans.after, ans.page, ans.next, want, wantNext)
		}
	}
	if m := most.Load(); m > 1 {
		t.Errorf("%d archived pages built at once, want 1", m)
	}
	if n := builds.Load(); n != int64(len(afters)+1) {
		t.Errorf("%d builds of %d distinct pages, want one each", n, len(afters)+1)
	}
}
