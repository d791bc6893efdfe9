package dbtest

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
)

func TestPostgresURL(t *testing.T) {
	ctx := context.Background()
	var schema string
	t.Run("inside", func(t *testing.T) {
		u := PostgresURL(t)
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		schema = parsed.Query().Get("search_path")
		if !regexp.MustCompile(`^t_[a-z0-9]{10}$`).MatchString(schema) {
			t.Fatalf("search_path = %q, want t_ and 10 lowercase letters or digits", schema)
		}
		db, err := sql.Open("pgx", u)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var current string
		if err := db.QueryRowContext(ctx, "SELECT current_schema()").Scan(&current); err != nil {
			t.Fatal(err)
		}
		if current != schema {
			t.Fatalf("current_schema() = %q, want %q", current, schema)
		}
		if _, err := db.ExecContext(ctx, "CREATE TABLE probe (id INT)"); err != nil {
			t.Fatal(err)
		}
		var where string
		if err := db.QueryRowContext(ctx, "SELECT table_schema FROM information_schema.tables WHERE table_name = 'probe' AND table_schema = $1", schema).Scan(&where); err != nil {
			t.Fatalf("the table is not in the test's schema: %v", err)
		}
	})
	// The subtest's cleanup has dropped the schema.
	db, err := sql.Open("pgx", ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = $1", schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("schema %s still exists after the test", schema)
	}
}

func TestPostgresURLsDiffer(t *testing.T) {
	if a, b := PostgresURL(t), PostgresURL(t); a == b {
		t.Fatalf("two calls returned the same URL %s", a)
	}
}

func TestSQLiteURL(t *testing.T) {
	u := SQLiteURL(t)
	path, ok := strings.CutPrefix(u, "sqlite://")
	if !ok || !strings.HasPrefix(path, os.TempDir()) && !strings.Contains(path, t.Name()) {
		t.Fatalf("SQLiteURL = %q, want sqlite:// and a file in the test's temporary directory", u)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the file should not exist yet: %v", err)
	}
	if SQLiteURL(t) == u {
		t.Fatal("two calls returned the same URL")
	}
}

func TestDialects(t *testing.T) {
	ds := Dialects(t)
	if len(ds) != 2 || ds[0].Name != "postgres" || ds[1].Name != "sqlite" ||
		!strings.HasPrefix(ds[0].URL, "postgres://") || !strings.HasPrefix(ds[1].URL, "sqlite://") {
		t.Fatalf("Dialects = %+v", ds)
	}
}

func TestDatabaseURL(t *testing.T) {
	ctx := context.Background()
	var name string
	t.Run("inside", func(t *testing.T) {
		u := DatabaseURL(t)
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		name = strings.TrimPrefix(parsed.Path, "/")
		if !regexp.MustCompile(`^t_[a-z0-9]{10}$`).MatchString(name) || parsed.Query().Has("search_path") {
			t.Fatalf("DatabaseURL = %q, want database t_ and 10 lowercase letters or digits, no search_path", u)
		}
		db, err := sql.Open("pgx", u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		var current, schema string
		if err := db.QueryRowContext(ctx, "SELECT current_database(), current_schema()").Scan(&current, &schema); err != nil {
			t.Fatal(err)
		}
		if current != name || schema != "public" {
			t.Fatalf("connected to %s, schema %s; want %s, public", current, schema, name)
		}
		// An open connection does not keep the database from being dropped.
		if _, err := db.ExecContext(ctx, "CREATE TABLE probe (id INT)"); err != nil {
			t.Fatal(err)
		}
	})
	db, err := sql.Open("pgx", ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("database %s still exists after the test", name)
	}
}
