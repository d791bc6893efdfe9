package bench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/seckill/seckill/internal/ownredis"
)

// Embedded, as a Redis or database URL, asks for the in-process server
// (miniredis) or an SQLite file in a temp directory.
const Embedded = "embedded"

// dialTimeout bounds how long Open waits for a server to answer.
const dialTimeout = 2 * time.Second

// Target names the stores to open. A run writes only to stores of its own
// unless told which: an empty Redis URL means a redis-server the run
// starts on a free loopback port and stops at Close (the embedded server
// if redis-server is not on PATH); an empty database URL, an SQLite file
// in a temp directory. Embedded means the embedded store; anything else
// must answer, and the run's keys and tables there carry its id and are
// removed at Close.
type Target struct {
	RedisURL    string // redis://...
	DatabaseURL string // postgres://..., postgresql://... or sqlite://PATH
	// NeedRedis and NeedDB say which stores the chosen approaches use; the
	// other is not opened.
	NeedRedis, NeedDB bool
	// Concurrency sizes the connection pools (one connection per client).
	Concurrency int
}

// Stores are the Redis and the database of one run, and what the run
// created in them. Every key and table of the run carries its id; Close
// removes them (and the embedded servers).
type Stores struct {
	Redis         *redis.Client // nil when no approach needs it
	RedisVersion  string        // "Redis 7.0.15", "miniredis (embedded, in this process)"
	RedisAddr     string
	RedisEmbedded bool
	RedisOwn      bool   // a redis-server of the run's own
	RedisNote     string // why the embedded server is used, unless asked for

	DB         *sql.DB // nil when no approach needs it
	Dialect    string  // "postgres" or "sqlite"
	DBVersion  string  // "PostgreSQL 15.20", "SQLite 3.50.4 (embedded, temp file)"
	DBAddr     string
	DBEmbedded bool
	DBNote     string
	// Schema is the PostgreSQL schema holding the run's tables.
	Schema string

	run     string // id of the run, in every key and table name
	items   atomic.Int64
	closers []func() error
}

// Open connects to (or starts) the stores of t.
func Open(ctx context.Context, t Target) (_ *Stores, err error) {
	s := &Stores{run: randomID(8)}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	conc := max(t.Concurrency, 1)
	if t.NeedRedis {
		if err := s.openRedis(ctx, t.RedisURL, conc); err != nil {
			return nil, err
		}
	}
	if t.NeedDB {
		if err := s.openDB(ctx, t.DatabaseURL, conc); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Run returns the id of this run: its keys are "{bench-<id>-<n>}:...", its
// tables are in schema "seckill_bench_<id>" (PostgreSQL) or named
// "seckill_bench_<id>_..." (SQLite).
func (s *Stores) Run() string { return s.run }

// Close drops what the run left in the stores and closes them.
func (s *Stores) Close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	s.closers = nil
	return errors.Join(errs...)
}

func (s *Stores) onClose(f func() error) { s.closers = append(s.closers, f) }

func (s *Stores) openRedis(ctx context.Context, rawURL string, conc int) error {
	if rawURL == "" {
		srv, err := ownredis.Start(ctx)
		switch {
		case err == nil:
			s.onClose(func() error { srv.Stop(); return nil })
			s.RedisOwn = true
			if err := s.dialRedis(ctx, srv.URL, conc); err != nil {
				return err
			}
			s.RedisVersion += " (a redis-server of this run's own)"
			return nil
		case errors.Is(err, ownredis.ErrNoServer):
			s.RedisNote = "no --redis given and redis-server is not on PATH"
			rawURL = Embedded
		default:
			return fmt.Errorf("bench: %w", err)
		}
	}
	if rawURL == Embedded {
		m := miniredis.NewMiniRedis()
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			return fmt.Errorf("bench: start embedded redis: %w", err)
		}
		s.onClose(func() error { m.Close(); return nil })
		s.RedisEmbedded = true
		if err := s.dialRedis(ctx, "redis://"+m.Addr()+"/0", conc); err != nil {
			return err
		}
		s.RedisVersion = "miniredis (embedded, in this process)"
		return nil
	}
	return s.dialRedis(ctx, rawURL, conc)
}

func (s *Stores) dialRedis(ctx context.Context, rawURL string, conc int) error {
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		return fmt.Errorf("bench: bad redis url: %w", err)
	}
	// One connection per client, for single calls and for pipelines alike.
	opts.PoolSize = conc + 8
	opts.PipelinePoolSize = conc
	opts.DialTimeout = dialTimeout
	// A plain dial first: an absent server is then one clear error, not
	// go-redis's logged dial retries.
	conn, err := net.DialTimeout(opts.Network, opts.Addr, dialTimeout)
	if err != nil {
		return fmt.Errorf("bench: cannot reach redis at %s: %w", opts.Addr, err)
	}
	conn.Close()
	rdb := redis.NewClient(opts)
	pctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		rdb.Close()
		return fmt.Errorf("bench: cannot reach redis at %s: %w", opts.Addr, err)
	}
	version := "?"
	if info, err := rdb.Info(pctx, "server").Result(); err == nil { // miniredis has no such section
		version = infoField(info, "redis_version")
	}
	s.Redis, s.RedisAddr = rdb, opts.Addr
	s.RedisVersion = "Redis " + version
	s.onClose(rdb.Close)
	return warmRedis(ctx, rdb, conc)
}

// warmRedis opens a connection per client up front, so that no
// approach's measurement pays for dialling.
func warmRedis(ctx context.Context, rdb *redis.Client, n int) error {
	conns := make([]*redis.Conn, n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	for i := range conns {
		conns[i] = rdb.Conn()
		if err := conns[i].Ping(ctx).Err(); err != nil {
			return fmt.Errorf("bench: redis: %w", err)
		}
	}
	return nil
}

// infoField returns the value of "name:value" in an INFO reply.
func infoField(info, name string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return "?"
}

func (s *Stores) openDB(ctx context.Context, rawURL string, conc int) error {
	if rawURL == "" {
		s.DBNote = "no --db given"
		rawURL = Embedded
	}
	switch {
	case rawURL == Embedded:
		dir, err := os.MkdirTemp("", "seckill-bench-")
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		s.onClose(func() error { return os.RemoveAll(dir) })
		s.DBEmbedded = true
		return s.openSQLite(ctx, filepath.Join(dir, "bench.db"))
	case strings.HasPrefix(rawURL, "sqlite://"):
		return s.openSQLite(ctx, strings.TrimPrefix(rawURL, "sqlite://"))
	case strings.HasPrefix(rawURL, "postgres://"), strings.HasPrefix(rawURL, "postgresql://"):
		return s.openPostgres(ctx, rawURL, conc)
	}
	return fmt.Errorf(`bench: unsupported database URL: want "postgres://...", "postgresql://...", "sqlite://PATH" or %q`, Embedded)
}

func (s *Stores) openPostgres(ctx context.Context, rawURL string, conc int) error {
	cfg, err := pgx.ParseConfig(rawURL)
	if err != nil {
		return fmt.Errorf("bench: %w", err) // pgx redacts the password
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = dialTimeout
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(conc)
	db.SetMaxIdleConns(conc)
	var version string
	if err := db.QueryRowContext(ctx, "SHOW server_version").Scan(&version); err != nil {
		db.Close()
		return fmt.Errorf("bench: cannot reach PostgreSQL at %s: %w", redactURL(rawURL), err)
	}
	schema := "seckill_bench_" + s.run
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		db.Close()
		return fmt.Errorf("bench: create schema: %w", err)
	}
	s.onClose(func() error {
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			return fmt.Errorf("bench: drop schema %s: %w", schema, err)
		}
		return nil
	})
	s.DB, s.Dialect, s.Schema = db, "postgres", schema
	s.DBVersion = "PostgreSQL " + strings.Fields(version)[0]
	s.DBAddr = fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
	return warmDB(ctx, db, conc)
}

// warmDB opens a connection per client up front.
func warmDB(ctx context.Context, db *sql.DB, n int) error {
	conns := make([]*sql.Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() { conns[i], errs[i] = db.Conn(ctx) })
	}
	wg.Wait()
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bench: open %d database connections: %w", n, err)
	}
	return nil
}

func (s *Stores) openSQLite(ctx context.Context, path string) error {
	if path == "" || strings.Contains(path, "?") {
		return fmt.Errorf("bench: bad SQLite path %q", path)
	}
	// Every transaction is BEGIN IMMEDIATE (it takes the write lock at once:
	// SQLite's FOR UPDATE). One connection, as the store uses: SQLite has
	// one writer at a time, and other connections of this process would
	// only poll the lock.
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	db.SetMaxOpenConns(1)
	var version string
	if err := db.QueryRowContext(ctx, "SELECT sqlite_version()").Scan(&version); err != nil {
		db.Close()
		return fmt.Errorf("bench: open SQLite %s: %w", path, err)
	}
	s.onClose(db.Close)
	s.DB, s.Dialect, s.DBAddr = db, "sqlite", path
	s.DBVersion = "SQLite " + version
	if s.DBEmbedded {
		s.DBVersion += " (embedded, temp file)"
	}
	return nil
}

// newItemTag returns a name unique to one hot item of this run.
func (s *Stores) newItemTag() string {
	return fmt.Sprintf("bench-%s-%d", s.run, s.items.Add(1))
}

// table returns the qualified name of one of the run's tables.
func (s *Stores) table(name string) string {
	if s.Dialect == "postgres" {
		return s.Schema + "." + name
	}
	return "seckill_bench_" + s.run + "_" + name
}

// redactURL drops the password of a URL, for messages.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable url)"
	}
	return u.Redacted()
}

func randomID(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}
