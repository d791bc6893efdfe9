// Package store is the system of record of seckill: sales, orders and the
// journal of every stock movement, in PostgreSQL or in an SQLite file.
//
// The inventory engine sells in Redis and appends every stock movement to a
// per-sale stream; the order consumer reads those events and hands them to
// Apply, which writes them here idempotently. The engine rebuilds a sale it
// lost from Snapshot.
//
// Both dialects go through database/sql with the same queries, written once
// with ? placeholders (rebind numbers them for PostgreSQL). Times are stored
// as unix milliseconds and flags as 0/1 in both, so rows scan alike. The only
// per-dialect parts are the migration files (migrations/<dialect>/NNN_name.sql),
// how a database is opened, and the parameter limit of one statement.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// The dialects Store.Dialect reports.
const (
	Postgres = "postgres"
	SQLite   = "sqlite"
)

// DefaultSQLiteFile is the database Open("") uses, in the working directory.
const DefaultSQLiteFile = "seckill.db"

// connectTimeout bounds connecting to PostgreSQL when the URL sets no
// connect_timeout, so an unreachable host fails Open instead of hanging.
const connectTimeout = 5 * time.Second

// Store is the database. It is safe for concurrent use. On PostgreSQL it
// keeps up to 32 connections (16 idle); on SQLite exactly one.
type Store struct {
	db      *sql.DB
	dialect string
	// maxParams is the most bind parameters one statement may carry.
	maxParams int
	// txs counts the transactions begun (for tests).
	txs atomic.Int64
	// schema is the PostgreSQL schema of the tables ("" on SQLite);
	// movePublic: an older release's tables in "public" move there
	// (prepareSchema), unless the URL's search_path named it.
	schema     string
	movePublic bool
	// file is the SQLite database's path ("" on PostgreSQL).
	file string
}

// Open opens and migrates the database named by url:
//
//	"postgres://..." or "postgresql://..."  PostgreSQL (pgx through database/sql)
//	"sqlite://PATH"                         the SQLite file at PATH, created if missing
//	                                        ("sqlite:///var/lib/seckill.db" for an absolute path)
//	""                                      the SQLite file DefaultSQLiteFile in the working directory
//
// Anything else is an error naming the accepted forms. Open pings the
// database ("cannot reach database: ...") and applies the migrations not
// applied yet. On PostgreSQL the tables are in the schema the URL's
// search_path begins with, if it sets one, else in DefaultSchema
// (OpenSchema).
func Open(ctx context.Context, url string) (*Store, error) {
	return OpenSchema(ctx, url, "")
}

// OpenSchema is Open with the PostgreSQL schema that holds the tables:
// the first entry of the URL's search_path if it sets one (schema must
// then be "" or the same), else schema, else DefaultSchema. Every
// connection works in it (search_path), and the migrations create it if
// it is missing. Unless the URL's search_path named it, an older
// release's tables in "public" (those its migrations made, as the
// migrations table there records) move into it once, in one transaction,
// when it holds none yet. SQLite has no schemas: schema must be "" there.
func OpenSchema(ctx context.Context, url, schema string) (*Store, error) {
	var (
		s   *Store
		err error
	)
	switch {
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		s, err = openPostgres(url, schema)
	case schema != "":
		return nil, fmt.Errorf("store: schema %q: only PostgreSQL has schemas, not SQLite", schema)
	case strings.HasPrefix(url, "sqlite://"):
		s, err = openSQLite(strings.TrimPrefix(url, "sqlite://"))
	case url == "":
		s, err = openSQLite(DefaultSQLiteFile)
	default:
		// Name only the scheme: the rest may hold a password.
		what := "without a scheme"
		if scheme, _, ok := strings.Cut(url, "://"); ok {
			what = fmt.Sprintf("with scheme %q", truncate(scheme, 20))
		}
		return nil, fmt.Errorf(`store: unsupported database URL (%s): want "postgres://...", "postgresql://...", "sqlite://PATH", or nothing for the SQLite file %s`,
			what, DefaultSQLiteFile)
	}
	if err != nil {
		return nil, err
	}
	if err := s.whileBusy(ctx, s.Ping); err != nil {
		s.db.Close()
		return nil, err
	}
	if err := s.whileBusy(ctx, s.migrate); err != nil {
		s.db.Close()
		return nil, err
	}
	return s, nil
}

// whileBusy runs f, again while SQLite answers SQLITE_BUSY, for up to 5 s.
// Several processes opening a new SQLite file at once race to switch it to
// WAL, and that switch can fail with SQLITE_BUSY without waiting on the
// busy timeout.
func (s *Store) whileBusy(ctx context.Context, f func(context.Context) error) error {
	deadline := time.Now().Add(5 * time.Second)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		err := f(ctx)
		if err == nil || s.dialect != SQLite || !strings.Contains(err.Error(), "SQLITE_BUSY") || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

func openPostgres(url, schema string) (*Store, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		// Not pgx's message: its redaction misses some malformed URLs, and
		// they would print the password.
		return nil, errors.New("store: bad database url: want postgres://user:password@host:port/db?options, special characters percent-encoded")
	}
	schema, fromURL, err := pickSchema(cfg.RuntimeParams["search_path"], schema)
	if err != nil {
		return nil, err
	}
	if !fromURL {
		// Every connection of the pool, from its first statement: the
		// queries name tables without a schema.
		cfg.RuntimeParams["search_path"] = schema
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = connectTimeout
	}
	db := stdlib.OpenDB(*cfg)
	// database/sql keeps only 2 idle connections by default: under load the
	// rest would be closed and reopened all the time.
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(16)
	db.SetConnMaxIdleTime(5 * time.Minute)
	return &Store{db: db, dialect: Postgres, maxParams: 65535, schema: schema, movePublic: !fromURL}, nil
}

func openSQLite(path string) (*Store, error) {
	if path == "" {
		return nil, errors.New(`store: "sqlite://" needs a file path, as in "sqlite://seckill.db"`)
	}
	if strings.Contains(path, "?") {
		return nil, fmt.Errorf("store: SQLite path %q must not contain '?'", path)
	}
	// WAL lets readers of other processes go on while we write; busy_timeout
	// makes a writer wait for another process's lock instead of failing; every
	// transaction starts with BEGIN IMMEDIATE so two processes never deadlock
	// upgrading a read lock to a write lock.
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	// One connection: SQLite has one writer at a time anyway, and with a single
	// connection no transaction of ours ever waits for a lock held by another
	// of our connections (SQLITE_BUSY inside one process). Simple and correct;
	// reads queue behind writes, which is fine for the system of record.
	db.SetMaxOpenConns(1)
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	return &Store{db: db, dialect: SQLite, maxParams: 32766, file: path}, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Dialect returns "postgres" or "sqlite".
func (s *Store) Dialect() string { return s.dialect }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("store: cannot reach database: %w", err)
	}
	return nil
}

// querier is what *sql.DB and *sql.Tx have in common.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// The query helpers take queries written with ? placeholders.

func (s *Store) exec(ctx context.Context, q querier, query string, args ...any) (sql.Result, error) {
	return q.ExecContext(ctx, s.rebind(query), args...)
}

func (s *Store) query(ctx context.Context, q querier, query string, args ...any) (*sql.Rows, error) {
	return q.QueryContext(ctx, s.rebind(query), args...)
}

func (s *Store) queryRow(ctx context.Context, q querier, query string, args ...any) *sql.Row {
	return q.QueryRowContext(ctx, s.rebind(query), args...)
}

// rebind rewrites the ? placeholders of query as $1, $2, ... on PostgreSQL.
// The queries of this package never hold a ? that is not a placeholder.
func (s *Store) rebind(query string) string {
	if s.dialect != Postgres {
		return query
	}
	return numberPlaceholders(query)
}

func numberPlaceholders(query string) string {
	var b strings.Builder
	b.Grow(len(query) + len(query)/2)
	n := 0
	for i := 0; i < len(query); i++ {
		if query[i] != '?' {
			b.WriteByte(query[i])
			continue
		}
		n++
		b.WriteByte('$')
		b.WriteString(strconv.Itoa(n))
	}
	return b.String()
}

// inTx runs f in a transaction and commits it if f returns nil.
func (s *Store) inTx(ctx context.Context, opts *sql.TxOptions, f func(tx *sql.Tx) error) error {
	s.txs.Add(1)
	tx, err := s.db.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// readTx runs f in a read-only transaction that sees one consistent state
// of the database.
func (s *Store) readTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	opts := &sql.TxOptions{ReadOnly: true}
	if s.dialect == Postgres {
		opts.Isolation = sql.LevelRepeatableRead
	} // SQLite: every transaction reads one snapshot
	return s.inTx(ctx, opts, f)
}

// insertRows inserts rows of ncols values each (args holds them one row
// after the other) with "head <rows> tail". If tail has a RETURNING clause
// of one column, got is called with each returned value.
//
// On PostgreSQL the rows go as one array per column, "head SELECT * FROM
// unnest($1::text[], $2::bigint[], ...) tail": the text of the statement
// does not depend on how many rows there are, so the driver prepares it
// once per connection (a multi-row VALUES list is a new statement for every
// row count, and its cache of prepared statements grew by one each). On
// SQLite, and for values of other types than string, int and int64, it is
// "head VALUES (?, ...), (?, ...) ... tail", in as many statements as the
// parameter limit needs.
func (s *Store) insertRows(ctx context.Context, q querier, head string, ncols int, args []any, tail string, got func(string)) error {
	if len(args) == 0 {
		return nil
	}
	if s.dialect == Postgres {
		if cols, types, ok := columnArrays(ncols, args); ok {
			return s.insertQuery(ctx, q, head+" SELECT * FROM unnest("+types+") "+tail, cols, got)
		}
	}
	perStmt := s.maxParams / ncols
	for len(args) > 0 {
		n := min(len(args)/ncols, perStmt)
		chunk := args[:n*ncols]
		args = args[n*ncols:]
		if err := s.insertQuery(ctx, q, s.rebind(head+" VALUES "+placeholders(n, ncols)+" "+tail), chunk, got); err != nil {
			return err
		}
	}
	return nil
}

// insertQuery runs one insert statement (placeholders numbered already).
func (s *Store) insertQuery(ctx context.Context, q querier, query string, args []any, got func(string)) error {
	if got == nil {
		_, err := q.ExecContext(ctx, query, args...)
		return err
	}
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	return scanEach(rows, func() error {
		var v string
		if err := rows.Scan(&v); err != nil {
			return err
		}
		got(v)
		return nil
	})
}

// columnArrays turns rows of ncols values (row after row in args) into one
// slice per column, []string or []int64, and returns them with the unnest
// arguments that take them ("$1::text[], $2::bigint[], ..."). ok is false
// if a column holds a value of another type, or of two types.
func columnArrays(ncols int, args []any) (cols []any, unnestArgs string, ok bool) {
	nrows := len(args) / ncols
	var b strings.Builder
	cols = make([]any, ncols)
	for c := range ncols {
		if c > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('$')
		b.WriteString(strconv.Itoa(c + 1))
		switch args[c].(type) {
		case string:
			col := make([]string, nrows)
			for r := range nrows {
				v, ok := args[r*ncols+c].(string)
				if !ok {
					return nil, "", false
				}
				col[r] = v
			}
			cols[c] = col
			b.WriteString("::text[]")
		case int, int64:
			col := make([]int64, nrows)
			for r := range nrows {
				switch v := args[r*ncols+c].(type) {
				case int:
					col[r] = int64(v)
				case int64:
					col[r] = v
				default:
					return nil, "", false
				}
			}
			cols[c] = col
			b.WriteString("::bigint[]")
		default:
			return nil, "", false
		}
	}
	return cols, b.String(), true
}

// scanStrings reads rows of one text column (ids, say), closing rows.
func scanStrings(rows *sql.Rows) ([]string, error) {
	var out []string
	err := scanEach(rows, func() error {
		var v string
		err := rows.Scan(&v)
		out = append(out, v)
		return err
	})
	return out, err
}

// scanEach calls scan for every row of rows, then closes them.
func scanEach(rows *sql.Rows, scan func() error) error {
	defer rows.Close()
	for rows.Next() {
		if err := scan(); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return rows.Close()
}

// placeholders returns "(?,?),(?,?),..." for rows rows of ncols values.
func placeholders(rows, ncols int) string {
	one := "(" + strings.Repeat("?,", ncols-1) + "?)"
	var b strings.Builder
	b.Grow(rows * (len(one) + 1))
	for i := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(one)
	}
	return b.String()
}

// ms is t in unix milliseconds, 0 for the zero time.
func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// fromMs is the inverse of ms: 0 is the zero time, anything else UTC.
func fromMs(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

func flag(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
