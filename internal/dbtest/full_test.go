package dbtest

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
)

// fatalTB is a testing.TB whose Fatalf records the message and ends the
// goroutine, as a test's would, without failing the test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// call runs PostgresURL on f in a goroutine of its own (Fatalf ends it),
// and returns its URL, "" if it failed.
func (f *fatalTB) call() string {
	got := make(chan string, 1)
	go func() {
		defer func() { got <- "" }()
		got <- PostgresURL(f)
	}()
	return <-got
}

// fullServer makes a role that may hold one connection to the server,
// opens that connection, and points $SECKILL_TEST_DATABASE_URL at the
// role: every connection PostgresURL opens then meets SQLSTATE 53300 (too
// many connections), as on a server whose max_connections are all taken,
// until the held connection is closed. It returns the held connection and
// the server's administrator.
func fullServer(t *testing.T) (held *pgx.Conn, admin *sql.DB) {
	ctx := context.Background()
	admin, err := sql.Open("pgx", ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	role := "t_" + randomName(10)
	var database string
	if err := admin.QueryRowContext(ctx, "SELECT current_database()").Scan(&database); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"CREATE ROLE " + role + " LOGIN CONNECTION LIMIT 1", "GRANT CREATE ON DATABASE " + database + " TO " + role} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { // after PostgresURL's, which drops the schema
		for _, q := range []string{"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '" + role + "'",
			"DROP OWNED BY " + role, "DROP ROLE " + role} {
			if _, err := admin.ExecContext(ctx, q); err != nil {
				t.Errorf("remove role %s: %s: %v", role, q, err)
			}
		}
	})
	u, err := url.Parse(ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	if held, err = pgx.Connect(ctx, u.String()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Close(ctx) })
	t.Setenv(URLEnv, u.String())
	return held, admin
}

// TestPostgresURLWaitsForAFullServer: a server with no connection to
// spare is waited for: once a connection is free, PostgresURL makes its
// schema.
func TestPostgresURLWaitsForAFullServer(t *testing.T) {
	held, admin := fullServer(t)
	var waits atomic.Int32
	whenFull = func() {
		if waits.Add(1) == 1 {
			held.Close(context.Background())
		}
	}
	t.Cleanup(func() { whenFull = nil })
	f := &fatalTB{TB: t}
	got := f.call()
	if got == "" {
		t.Fatalf("PostgresURL on a full server: %s", f.msg)
	}
	if waits.Load() == 0 {
		t.Fatal("PostgresURL never found the server full")
	}
	u, err := url.Parse(got)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := admin.QueryRow("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = $1", u.Query().Get("search_path")).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the schema of %s: %d %v", got, n, err)
	}
}

// TestPostgresURLOnAServerStayingFull: a server that stays full fails the
// test with what is wrong and what to do about it.
func TestPostgresURLOnAServerStayingFull(t *testing.T) {
	fullServer(t)
	fullFor = 0 // the first answer is the last
	t.Cleanup(func() { fullFor = defaultFullFor })
	f := &fatalTB{TB: t}
	if got := f.call(); got != "" {
		t.Fatalf("PostgresURL on a full server returned %s", got)
	}
	for _, want := range []string{"full", "max_connections", "go test -p 2", "53300"} {
		if !strings.Contains(f.msg, want) {
			t.Errorf("the failure %q does not say %q", f.msg, want)
		}
	}
	if strings.Contains(f.msg, "start it") {
		t.Errorf("the failure %q says to start a server that runs", f.msg)
	}
}
