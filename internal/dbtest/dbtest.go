// Package dbtest provides databases for tests: a fresh schema in the
// machine's PostgreSQL per test, and a fresh SQLite file per test. Each is
// removed when the test ends, so tests (and test binaries) may run in
// parallel on one PostgreSQL server.
//
// It is meant to be imported from _test.go files only.
package dbtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
)

// DefaultURL is the PostgreSQL PostgresURL uses unless URLEnv is set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// URLEnv names the environment variable that overrides DefaultURL.
const URLEnv = "SECKILL_TEST_DATABASE_URL"

// PostgresURL creates a schema of its own for the test ("t_" and 10 random
// lowercase letters and digits) in the machine's PostgreSQL
// ($SECKILL_TEST_DATABASE_URL, or DefaultURL) and returns a URL whose
// connections work in it: the URL sets search_path, which pgx sends as a
// run-time parameter when it connects. The schema and everything in it is
// dropped in tb.Cleanup (a failure to drop is logged, not fatal); close what uses it with a cleanup registered after
// this call (or with defer). A server with no connection to spare is waited
// for (whileFull). If the server cannot be reached, the test fails with a
// one-line reason (it never skips).
func PostgresURL(tb testing.TB) string {
	tb.Helper()
	base := ServerURL()
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		tb.Fatalf("dbtest: $%s (or the default) must be a postgres:// URL, got %q", URLEnv, base)
	}
	db, err := sql.Open("pgx", base)
	if err != nil {
		tb.Fatalf("dbtest: open PostgreSQL %s: %v", u.Redacted(), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), fullFor+10*time.Second)
	defer cancel()
	schema := "t_" + randomName(10)
	// The name is ours (letters and digits only): safe to splice in.
	if err := whileFull(ctx, db, "CREATE SCHEMA "+schema); err != nil {
		db.Close()
		if isFull(err) {
			tb.Fatalf("dbtest: %s", fullMessage(u, err))
		}
		tb.Fatalf("dbtest: cannot create a schema in PostgreSQL %s (start it, or point $%s elsewhere): %v", u.Redacted(), URLEnv, err)
	}
	tb.Cleanup(func() {
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), fullFor+30*time.Second)
		defer cancel()
		if err := whileFull(ctx, db, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			tb.Logf("dbtest: drop schema %s: %v", schema, err)
		}
	})
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// DatabaseURL creates a database of its own for the test ("t_" and 10
// random lowercase letters and digits) on the machine's PostgreSQL and
// returns a URL to it that sets no search_path: its connections see the
// database as a deployment would, "public" first. It is for tests of what
// lives outside one schema (where tables go by default, moving them out of
// "public"); the shared database's own schemas are never touched. The
// database is dropped in tb.Cleanup, its connections closed by force; close
// what uses it with a cleanup registered after this call.
func DatabaseURL(tb testing.TB) string {
	tb.Helper()
	base := ServerURL()
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		tb.Fatalf("dbtest: $%s (or the default) must be a postgres:// URL, got %q", URLEnv, base)
	}
	db, err := sql.Open("pgx", base)
	if err != nil {
		tb.Fatalf("dbtest: open PostgreSQL %s: %v", u.Redacted(), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), fullFor+30*time.Second)
	defer cancel()
	name := "t_" + randomName(10)
	// The name is ours (letters and digits only): safe to splice in.
	if err := whileFull(ctx, db, "CREATE DATABASE "+name); err != nil {
		db.Close()
		if isFull(err) {
			tb.Fatalf("dbtest: %s", fullMessage(u, err))
		}
		tb.Fatalf("dbtest: cannot create a database in PostgreSQL %s: %v", u.Redacted(), err)
	}
	tb.Cleanup(func() {
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), fullFor+30*time.Second)
		defer cancel()
		if err := whileFull(ctx, db, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			tb.Logf("dbtest: drop database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	q := u.Query()
	q.Del("search_path")
	u.RawQuery = q.Encode()
	return u.String()
}

// defaultFullFor is how long PostgresURL and DatabaseURL wait for a
// PostgreSQL that has no connection to spare, fullFor unless a test
// shortens it. Test binaries run in parallel take and free connections all
// the time: a full server is usually full for a moment.
const defaultFullFor = 30 * time.Second

var (
	fullFor = defaultFullFor
	// whenFull, if set (by tests), is called each time whileFull waits.
	whenFull func()
)

// whileFull runs query on db, and again while the server answers that it
// is full, with a growing wait between tries, for up to fullFor.
func whileFull(ctx context.Context, db *sql.DB, query string) error {
	deadline := time.Now().Add(fullFor)
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		_, err := db.ExecContext(ctx, query)
		if !isFull(err) || time.Now().Add(wait).After(deadline) {
			return err
		}
		if whenFull != nil {
			whenFull()
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// isFull reports whether err is PostgreSQL's refusal of a connection for
// want of a free one (SQLSTATE 53300: max_connections, or a role's limit).
func isFull(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "53300"
}

func fullMessage(u *url.URL, err error) string {
	return fmt.Sprintf("PostgreSQL %s is full: every connection its max_connections allow is taken (SQLSTATE 53300), and stayed so for %s; "+
		"run fewer test binaries at once (go test -p 2), or raise max_connections: %v", u.Redacted(), fullFor, err)
}

// ServerURL is the machine's PostgreSQL the tests use: $SECKILL_TEST_DATABASE_URL, or DefaultURL.
func ServerURL() string {
	if u := os.Getenv(URLEnv); u != "" {
		return u
	}
	return DefaultURL
}

// SQLiteURL returns "sqlite://" and the path of a database file, not yet
// created, in tb.TempDir() (removed when the test ends).
func SQLiteURL(tb testing.TB) string {
	tb.Helper()
	return "sqlite://" + filepath.Join(tb.TempDir(), "seckill.db")
}

// Dialect is a database for a table test: Name is "postgres" or "sqlite".
type Dialect struct {
	Name string
	URL  string
}

// Dialects returns a fresh PostgreSQL schema and a fresh SQLite file, in
// that order, for tests that run on both:
//
//	for _, d := range dbtest.Dialects(t) {
//		t.Run(d.Name, func(t *testing.T) { ... store.Open(ctx, d.URL) ... })
//	}
//
// Both are removed when tb ends.
func Dialects(tb testing.TB) []Dialect {
	tb.Helper()
	return []Dialect{{Name: "postgres", URL: PostgresURL(tb)}, {Name: "sqlite", URL: SQLiteURL(tb)}}
}

func randomName(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}
