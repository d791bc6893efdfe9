package store

import (
	"context"
	"database/sql"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
)

// openIn opens url in schema (OpenSchema) and closes the store when the
// test ends, after checking its order counts.
func openIn(t *testing.T, url, schema string) *Store {
	t.Helper()
	s, err := OpenSchema(context.Background(), url, schema)
	if err != nil {
		t.Fatalf("OpenSchema(%q): %v", schema, err)
	}
	t.Cleanup(func() {
		checkOrderCounts(t, s)
		s.Close()
	})
	return s
}

// rawDB opens url with database/sql alone (no store), closed when the test
// ends.
func rawDB(t *testing.T, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", url)
	must(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// objectsIn lists what schema holds in PostgreSQL's catalog, sorted:
// "table orders", "function order_counts_add", and any view, sequence
// not owned by a column, or type that is not a table's row type, by kind.
func objectsIn(t *testing.T, db *sql.DB, schema string) []string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), `
		SELECT CASE c.relkind WHEN 'r' THEN 'table ' ELSE 'relation(' || c.relkind::text || ') ' END || c.relname
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'c', 'S')
		  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
		                  AND d.objid = c.oid AND d.deptype IN ('a', 'i'))
		UNION ALL
		SELECT 'function ' || p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = $1
		UNION ALL
		SELECT 'type ' || y.typname FROM pg_type y JOIN pg_namespace n ON n.oid = y.typnamespace
		WHERE n.nspname = $1 AND y.typrelid = 0 AND y.typcategory <> 'A'`, schema)
	must(t, err)
	var out []string
	must(t, scanEach(rows, func() error {
		var o string
		out = append(out, o)
		return rows.Scan(&out[len(out)-1])
	}))
	slices.Sort(out)
	return out
}

// ourObjects is what the migrations make, as objectsIn lists it.
func ourObjects(t *testing.T) []string {
	t.Helper()
	ms, err := migrations(Postgres)
	must(t, err)
	out := []string{"table schema_migrations"}
	for _, m := range ms {
		for _, o := range m.creates() {
			out = append(out, o.kind+" "+o.name)
		}
	}
	slices.Sort(out)
	return out
}

// deployOld makes the database at url look like a deployment of the
// release before schemas: every migration applied by its code, in the
// connection's default search path ("public"), each recorded in
// schema_migrations as it recorded them; then a sale with one order
// (counted into order_counts by the trigger).
func deployOld(t *testing.T, url string) {
	t.Helper()
	ctx := context.Background()
	db := rawDB(t, url)
	ms, err := migrations(Postgres)
	must(t, err)
	_, err = db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		applied_at BIGINT NOT NULL
	)`)
	must(t, err)
	for _, m := range ms {
		_, err := db.ExecContext(ctx, m.sql)
		must(t, err)
		_, err = db.ExecContext(ctx, "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)", m.version, time.Now().UnixMilli())
		must(t, err)
	}
	for _, q := range []string{
		"INSERT INTO sales (id, per_user_limit, created_at) VALUES ('old', 1, 1)",
		"INSERT INTO sale_items (sale_id, sku, position, initial_stock, stocked) VALUES ('old', 'a', 0, 10, 10)",
		"INSERT INTO orders (id, sale_id, user_id, status, created_at, sku, qty) VALUES ('o1', 'old', 'u1', 'confirmed', 1, 'a', 1)",
	} {
		_, err := db.ExecContext(ctx, q)
		must(t, err)
	}
	if got := objectsIn(t, db, "public"); !slices.Equal(got, ourObjects(t)) {
		t.Fatalf("the old deployment's public schema holds %v, want %v", got, ourObjects(t))
	}
}

// checkOldSale checks that s reads the old deployment's sale and order, and
// that a new order is counted (the trigger's function finds order_counts
// where it is now).
func checkOldSale(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	sale, err := s.Sale(ctx, "old")
	must(t, err)
	if sale.PerUserLimit != 1 || len(sale.Items) != 1 || sale.Items[0].SKU != "a" {
		t.Fatalf("the old sale reads %+v", sale)
	}
	_, err = s.exec(ctx, s.db, "INSERT INTO orders (id, sale_id, user_id, status, created_at, sku, qty) VALUES ('o2', 'old', 'u2', 'confirmed', 2, 'a', 1)")
	must(t, err)
	counts, err := s.CountOrdersOf(ctx, []string{"old"})
	must(t, err)
	if n := counts["old"][inventory.OrderConfirmed]; n != 2 {
		t.Fatalf("confirmed orders of the old sale = %d, want 2 (the old one kept and the new one counted)", n)
	}
}

// TestFreshDatabaseUsesSeckillSchema: on a database of its own, without a
// search_path in the URL, the tables go to schema "seckill" and nothing to
// "public".
func TestFreshDatabaseUsesSeckillSchema(t *testing.T) {
	t.Parallel()
	u := dbtest.DatabaseURL(t)
	s := openIn(t, u, "")
	db := rawDB(t, u)
	if got := objectsIn(t, db, "public"); len(got) != 0 {
		t.Errorf("public holds %v, want nothing", got)
	}
	if got, want := objectsIn(t, db, DefaultSchema), ourObjects(t); !slices.Equal(got, want) {
		t.Errorf("schema %s holds %v, want %v", DefaultSchema, got, want)
	}
	must(t, s.CreateSale(context.Background(), Sale{Sale: inventory.Sale{ID: "s", PerUserLimit: 1, Items: []inventory.Item{{SKU: "a", Stock: 1}}}}))
	var n int
	must(t, db.QueryRowContext(context.Background(), "SELECT count(*) FROM seckill.sales").Scan(&n))
	if n != 1 {
		t.Errorf("seckill.sales holds %d rows, want the sale just created", n)
	}
}

// TestOurObjectsAreWhatMigrationsCreate: the objects the schema move takes
// out of "public" (read from the migration files) are exactly what the
// migrations create; a migration that creates something else fails here
// until the move knows about it.
func TestOurObjectsAreWhatMigrationsCreate(t *testing.T) {
	t.Parallel()
	u := dbtest.PostgresURL(t)
	openIn(t, u, "")
	schema := urlSchema(t, u)
	if got, want := objectsIn(t, rawDB(t, u), schema), ourObjects(t); !slices.Equal(got, want) {
		t.Fatalf("the migrations create %v; the move knows %v", got, want)
	}
}

func urlSchema(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	must(t, err)
	return u.Query().Get("search_path")
}

// TestUpgradeMovesTablesOutOfPublic: a deployment whose tables are in
// "public" finds them in "seckill" after the upgrade, rows included; the
// application's own tables stay in "public".
func TestUpgradeMovesTablesOutOfPublic(t *testing.T) {
	t.Parallel()
	u := dbtest.DatabaseURL(t)
	deployOld(t, u)
	db := rawDB(t, u)
	_, err := db.ExecContext(context.Background(), "CREATE TABLE customers (id INT); INSERT INTO customers VALUES (7)")
	must(t, err)

	s := openIn(t, u, "")
	if got := objectsIn(t, db, "public"); !slices.Equal(got, []string{"table customers"}) {
		t.Errorf("public holds %v after the upgrade, want the application's table alone", got)
	}
	if got, want := objectsIn(t, db, DefaultSchema), ourObjects(t); !slices.Equal(got, want) {
		t.Errorf("schema %s holds %v, want %v", DefaultSchema, got, want)
	}
	checkOldSale(t, s)
	var config string
	must(t, db.QueryRowContext(context.Background(),
		"SELECT array_to_string(proconfig, ',') FROM pg_proc WHERE proname = 'order_counts_add'").Scan(&config))
	if config != "search_path=seckill" {
		t.Errorf("order_counts_add's settings = %q, want search_path=seckill", config)
	}
}

// withParam returns raw with its query parameter k set to v.
func withParam(t *testing.T, raw, k, v string) string {
	t.Helper()
	u, err := url.Parse(raw)
	must(t, err)
	q := u.Query()
	q.Set(k, v)
	u.RawQuery = q.Encode()
	return u.String()
}

// TestUpgradeToNamedSchema: the schema option names where the tables go,
// and the old deployment's move there.
func TestUpgradeToNamedSchema(t *testing.T) {
	t.Parallel()
	t.Run("fresh", func(t *testing.T) {
		t.Parallel()
		u := dbtest.DatabaseURL(t)
		openIn(t, u, "shop_seckill")
		db := rawDB(t, u)
		if got, want := objectsIn(t, db, "shop_seckill"), ourObjects(t); !slices.Equal(got, want) {
			t.Errorf("shop_seckill holds %v, want %v", got, want)
		}
		for _, other := range []string{"public", DefaultSchema} {
			if got := objectsIn(t, db, other); len(got) != 0 {
				t.Errorf("%s holds %v, want nothing", other, got)
			}
		}
	})
	t.Run("upgrade", func(t *testing.T) {
		t.Parallel()
		u := dbtest.DatabaseURL(t)
		deployOld(t, u)
		s := openIn(t, u, "shop_seckill")
		db := rawDB(t, u)
		if got := objectsIn(t, db, "public"); len(got) != 0 {
			t.Errorf("public holds %v after the upgrade, want nothing", got)
		}
		checkOldSale(t, s)
	})
	t.Run("public", func(t *testing.T) { // kept where it is
		t.Parallel()
		u := dbtest.DatabaseURL(t)
		deployOld(t, u)
		s := openIn(t, u, "public")
		checkOldSale(t, s)
		if got := objectsIn(t, rawDB(t, u), DefaultSchema); len(got) != 0 {
			t.Errorf("%s holds %v, want nothing", DefaultSchema, got)
		}
	})
}

// TestUpgradeLeavesPublicAlone: nothing moves when the target schema holds
// a deployment already, when "public"'s schema_migrations is not ours, or
// when the URL's search_path names the schema (the URL's user put the
// tables there; "public" is someone else's).
func TestUpgradeLeavesPublicAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("target holds tables", func(t *testing.T) {
		t.Parallel()
		u := dbtest.DatabaseURL(t)
		deployOld(t, u)
		db := rawDB(t, u)
		_, err := db.ExecContext(ctx, "CREATE SCHEMA seckill; CREATE TABLE seckill.schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)")
		must(t, err)
		openIn(t, u, "")
		if got, want := objectsIn(t, db, "public"), ourObjects(t); !slices.Equal(got, want) {
			t.Errorf("public holds %v, want the old deployment's %v untouched", got, want)
		}
	})
	t.Run("not our migrations table", func(t *testing.T) {
		t.Parallel()
		u := dbtest.DatabaseURL(t)
		db := rawDB(t, u)
		_, err := db.ExecContext(ctx, `CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY, dirty BOOLEAN NOT NULL);
			INSERT INTO schema_migrations VALUES (1, false);
			CREATE TABLE orders (id INT)`)
		must(t, err)
		openIn(t, u, "")
		if got := objectsIn(t, db, "public"); !slices.Equal(got, []string{"table orders", "table schema_migrations"}) {
			t.Errorf("public holds %v, want the application's two tables", got)
		}
		if got, want := objectsIn(t, db, DefaultSchema), ourObjects(t); !slices.Equal(got, want) {
			t.Errorf("schema %s holds %v, want %v", DefaultSchema, got, want)
		}
	})
	t.Run("schema named by the url", func(t *testing.T) {
		t.Parallel()
		u := dbtest.DatabaseURL(t)
		deployOld(t, u)
		openIn(t, withParam(t, u, "search_path", "elsewhere"), "")
		db := rawDB(t, u)
		if got, want := objectsIn(t, db, "public"), ourObjects(t); !slices.Equal(got, want) {
			t.Errorf("public holds %v, want %v untouched", got, want)
		}
		if got, want := objectsIn(t, db, "elsewhere"), ourObjects(t); !slices.Equal(got, want) {
			t.Errorf("elsewhere holds %v, want %v", got, want)
		}
	})
}

// TestUpgradeConcurrently: instances upgrading one deployment at once all
// start; the tables move once, rows kept.
func TestUpgradeConcurrently(t *testing.T) {
	t.Parallel()
	u := dbtest.DatabaseURL(t)
	deployOld(t, u)
	const n = 4
	stores := make([]*Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = OpenSchema(context.Background(), u, "") })
	}
	wg.Wait()
	for i, s := range stores {
		if errs[i] != nil {
			t.Errorf("instance %d: %v", i, errs[i])
			continue
		}
		t.Cleanup(func() { s.Close() })
	}
	if t.Failed() {
		t.FailNow()
	}
	if got := objectsIn(t, rawDB(t, u), "public"); len(got) != 0 {
		t.Errorf("public holds %v after the upgrade, want nothing", got)
	}
	checkOldSale(t, stores[0])
	checkOrderCounts(t, stores[n-1])
}

// TestSchemaOptionErrors: a schema option that disagrees with the URL's
// search_path, a schema on SQLite, and a name that is no plain identifier
// are refused.
func TestSchemaOptionErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct{ name, url, schema, want string }{
		{"disagrees", dbtest.PostgresURL(t), "other", "search_path"},
		{"sqlite", dbtest.SQLiteURL(t), "shop", "SQLite"},
		{"bad name", dbtest.DatabaseURL(t), "Shop-1", "schema"},
		{"user first", withParam(t, dbtest.DatabaseURL(t), "search_path", `"$user", public`), "", "search_path"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := OpenSchema(ctx, c.url, c.schema)
			if err == nil {
				s.Close()
				t.Fatal("opened; want an error")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not mention %q", err, c.want)
			}
		})
	}
}
