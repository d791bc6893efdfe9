package demo

import (
	"context"
	"database/sql"
	"slices"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/service"
)

// TestDemoLeavesNothing: the demo on a real Redis and a real PostgreSQL,
// each of the test's own (a redis-server started for it, a database
// created for it), leaves no key in the server and no schema, table or
// row in the database; and it never touches the tables an older seckill
// release left in "public" (which a store opened in a schema named by an
// option, not by the URL, would move into the schema the demo drops).
func TestDemoLeavesNothing(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	dbURL := dbtest.DatabaseURL(t)
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL);
		INSERT INTO schema_migrations VALUES (1, 1);
		CREATE TABLE sales (id TEXT PRIMARY KEY); INSERT INTO sales VALUES ('production')`); err != nil {
		t.Fatal(err)
	}
	objects := func() []string {
		t.Helper()
		rows, err := db.Query(`SELECT n.nspname || '.' || coalesce(c.relname, '') FROM pg_namespace n
			LEFT JOIN pg_class c ON c.relnamespace = n.oid AND c.relkind = 'r'
			WHERE n.nspname NOT LIKE 'pg\_%' AND n.nspname <> 'information_schema' ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		return out
	}
	before := objects()

	res, err := Run(context.Background(), service.Config{RedisURL: "redis://" + srv.Addr() + "/0", DatabaseURL: dbURL},
		Config{Buyers: 60, Concurrency: 8, HotStock: 10, PaymentTimeout: 500 * time.Millisecond})
	if err != nil || !res.OK() {
		t.Fatalf("demo: %v, %+v", err, res)
	}
	ctx := context.Background()
	if keys, err := rdb.DBSize(ctx).Result(); err != nil || keys != 0 {
		info, _ := rdb.Info(ctx, "keyspace").Result()
		t.Errorf("the demo left %d keys in db 0 (%v); keyspace: %s", keys, err, info)
	}
	if after := objects(); !slices.Equal(after, before) {
		t.Errorf("schemas and tables before the demo %v, after %v", before, after)
	}
	var sale string
	if err := db.QueryRow("SELECT id FROM public.sales").Scan(&sale); err != nil || sale != "production" {
		t.Errorf("public.sales: %q, %v; want its row untouched", sale, err)
	}
}
