package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// migrationFiles holds each dialect's migrations as
// migrations/<dialect>/NNN_name.sql; NNN is the version.
//
//go:embed migrations
var migrationFiles embed.FS

// migration is one embedded migration file.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the dialect's migrations in version order.
func migrations(dialect string) ([]migration, error) {
	dir := path.Join("migrations", dialect)
	entries, err := fs.ReadDir(migrationFiles, dir)
	if err != nil {
		return nil, err
	}
	var ms []migration
	seen := map[int]string{}
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 || !strings.HasSuffix(e.Name(), ".sql") {
			return nil, fmt.Errorf("migration %s/%s: name must be NNN_name.sql", dir, e.Name())
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations %s and %s have the same version %d", prev, e.Name(), v)
		}
		seen[v] = e.Name()
		b, err := migrationFiles.ReadFile(path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	return ms, nil
}

// migrate applies every migration not recorded in schema_migrations, each
// in its own transaction together with its record. On PostgreSQL the
// transaction first takes an advisory lock (per schema), so two processes
// opening the same database at once apply each migration once; the second
// waits, then finds it recorded. On SQLite, BEGIN IMMEDIATE does the same.
// On PostgreSQL the schema is made ready first (prepareSchema).
func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrations(s.dialect)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if s.dialect == Postgres {
		if err := s.inTx(ctx, nil, func(tx *sql.Tx) error { return s.prepareSchema(ctx, tx) }); err != nil {
			return fmt.Errorf("store: schema %s: %w", s.schema, err)
		}
	}
	for _, m := range ms {
		if err := s.inTx(ctx, nil, func(tx *sql.Tx) error { return s.applyMigration(ctx, tx, m) }); err != nil {
			return fmt.Errorf("store: migration %s: %w", m.name, err)
		}
	}
	return nil
}

// migrationLockKey is the first key of the advisory lock migrations take;
// the second is a hash of the schema's name (lockMigrations). Releases
// before schemas hashed current_schema(), the same name.
const migrationLockKey = 0x5ec4111

func (s *Store) applyMigration(ctx context.Context, tx *sql.Tx, m migration) error {
	if s.dialect == Postgres {
		if err := s.lockMigrations(ctx, tx, s.schema); err != nil {
			return err
		}
	}
	if _, err := s.exec(ctx, tx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		applied_at BIGINT NOT NULL
	)`); err != nil {
		return err
	}
	var n int
	if err := s.queryRow(ctx, tx, "SELECT COUNT(*) FROM schema_migrations WHERE version = ?", m.version).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	// No arguments: pgx sends this with the simple protocol, which runs a
	// file of several statements; SQLite runs them all too.
	if _, err := tx.ExecContext(ctx, m.sql); err != nil {
		return err
	}
	_, err := s.exec(ctx, tx, "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)", m.version, time.Now().UnixMilli())
	return err
}
