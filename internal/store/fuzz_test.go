package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
)

// Fuzz tests of what the store parses: database URLs, and the events the
// order pipeline hands to Apply.

// FuzzOpenURLSecret: a database URL Open refuses without dialling (an
// unsupported scheme, a PostgreSQL URL pgx cannot parse) fails with an
// error that does not show the URL's password.
func FuzzOpenURLSecret(f *testing.F) {
	f.Add("mysql", "user", "hunter2-secret", "db.example:3306/shop")
	f.Add("postgres", "u", "hunter2-secret", "host:port/db")
	f.Add("postgresql", "u", "hunter2-secret", "[::1/db")
	f.Add("postgres", "u", "hunter2%zz", "h/db")
	f.Add("postgres", "u", "hunter2-secret", "h/db?sslmode=bogus")
	f.Add("redis", "", "hunter2-secret", "h:6379/0")
	f.Add("", "u", "hunter2-secret", "h/db")
	f.Fuzz(func(t *testing.T, scheme, user, secret, rest string) {
		url := scheme + "://" + user + ":" + secret + "@" + rest
		if len(secret) < 8 || strings.Contains(scheme+user+rest, secret) || strings.HasPrefix(url, "sqlite://") {
			return
		}
		if strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://") {
			if _, err := pgx.ParseConfig(url); err == nil {
				return // Open would dial it
			}
		}
		s, err := Open(context.Background(), url)
		if err == nil {
			s.Close()
			t.Fatalf("Open(%q) succeeded", url)
		}
		if strings.Contains(err.Error(), secret) {
			t.Fatalf("Open(%q) error shows the password: %v", url, err)
		}
	})
}

// FuzzApplyEvent: a stream entry the pipeline decodes (inventory.ParseEvent)
// and Apply accepts is written on PostgreSQL and on SQLite alike, and
// applying it again changes nothing; an entry Apply refuses is a
// PermanentError (so the consumer dead-letters it rather than retrying
// forever) and writes nothing.
func FuzzApplyEvent(f *testing.F) {
	const order = "s1.01JD0000000000000000000000"
	f.Add("", true, "bought", "1700000000000", order, "u1", "A=1,B=2", "k", "", "", "", "", "", "", "")
	f.Add("", true, "cancelled", "1700000000001", order, "u1", "A=1", "", "1700000000000", "", "", "", "", "", "")
	f.Add("", true, "created", "1", "", "", "A=100,B=-1", "", "", "", "", "2", "0", "0", "1")
	f.Add("", true, "restocked", "5", "", "", "", "", "", "A", "10", "", "", "", "")
	f.Add("", true, "restocked", "5", "", "", "", "", "", "B", "10", "", "", "", "")
	f.Add("", true, "paused", "7", "", "", "", "", "", "", "", "", "", "", "")
	f.Add("99999999999999999999-99999999999999999999", false, "resumed", "7", "", "", "", "", "", "", "", "", "", "", "")
	f.Add("1-1", false, "bought", "1", order, "u1", "Z=1", "", "", "", "", "", "", "", "")
	f.Add("x", false, "bought", "1", "s2.01JD0000000000000000000000", "u 1", "A=0", "key with space", "", "", "", "", "", "", "")
	f.Add("", true, "created", "1", "", "", "A=1,A=2", "", "", "", "", "0", "5", "3", "0")
	ctx := context.Background()
	var stores []*Store
	for _, d := range dbtest.Dialects(f) {
		s := openStore(f, d.URL)
		if err := s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: "s1", PerUserLimit: 5,
			Items: []inventory.Item{{SKU: "A", Stock: 100}, {SKU: "B", Stock: -1}}}}); err != nil {
			f.Fatal(err)
		}
		stores = append(stores, s)
	}
	var seq atomic.Int64
	f.Fuzz(func(t *testing.T, id string, freshID bool, typ, at, ord, user, items, key, created, sku, qty, limit, start, end, paused string) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if freshID {
			id = strconv.FormatInt(seq.Add(1), 10) + "-0"
		}
		values := map[string]any{"type": typ, "at": at, "order": ord, "user": user, "items": items, "key": key,
			"created": created, "sku": sku, "qty": qty, "remaining": "0", "limit": limit, "start": start, "end": end, "paused": paused}
		ev, err := inventory.ParseEvent("s1", redis.XMessage{ID: id, Values: values})
		if err != nil {
			return // dead-lettered by the consumer before Apply
		}
		var refused []bool
		for _, s := range stores {
			before, err := s.Journal(ctx, "s1")
			if err != nil {
				t.Fatal(err)
			}
			err = s.Apply(ctx, "s1", []inventory.Event{ev})
			after, jerr := s.Journal(ctx, "s1")
			if jerr != nil {
				t.Fatal(jerr)
			}
			if err != nil {
				if !errors.Is(err, ErrPermanent) {
					t.Fatalf("%s: Apply(%+v) = %v: not permanent, so the consumer would retry it forever", s.dialect, ev, err)
				}
				if len(after) != len(before) {
					t.Fatalf("%s: refused event wrote %d journal rows", s.dialect, len(after)-len(before))
				}
				refused = append(refused, true)
				continue
			}
			refused = append(refused, false)
			if err := s.Apply(ctx, "s1", []inventory.Event{ev}); err != nil {
				t.Fatalf("%s: applying %+v again: %v", s.dialect, ev, err)
			}
			again, err := s.Journal(ctx, "s1")
			if err != nil || len(again) != len(after) {
				t.Fatalf("%s: applying %+v again added %d journal rows (%v)", s.dialect, ev, len(again)-len(after), err)
			}
		}
		if refused[0] != refused[1] {
			t.Fatalf("%+v: refused on %s %v, on %s %v", ev, stores[0].dialect, refused[0], stores[1].dialect, refused[1])
		}
	})
}
