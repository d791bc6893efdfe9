package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// A database belongs to one Redis key prefix (migration 019). The database
// is the record of the sales and the prefix only names their copies in
// Redis: a service of another prefix on the same database would rebuild
// each sale under keys of its own and sell its units once more.

// KeyPrefixError is the refusal of a key prefix by a database that belongs
// to another.
type KeyPrefixError struct {
	Database string // which database: `schema "seckill"`, `SQLite file "seckill.db"`
	Owner    string // the prefix the database belongs to
	Prefix   string // the prefix refused
	// Separate says how to give a deployment a database of its own.
	Separate string
}

func (e *KeyPrefixError) Error() string {
	return fmt.Sprintf("the database (%s) belongs to key prefix %q; this instance's is %q: two prefixes on one database would sell each sale once per prefix — give each deployment its own %s or the same prefix",
		e.Database, e.Owner, e.Prefix, e.Separate)
}

// ClaimKeyPrefix makes the database belong to prefix if it belongs to no
// prefix yet (a new database, or one an older release wrote), and returns
// a *KeyPrefixError if it belongs to another. Of several stores claiming
// one database at once with different prefixes, exactly one wins: the
// first row written stays, and each reads back what was written.
func (s *Store) ClaimKeyPrefix(ctx context.Context, prefix string) error {
	if prefix == "" {
		return errors.New("store: claim an empty key prefix")
	}
	if _, err := s.exec(ctx, s.db, "INSERT INTO key_prefix (id, prefix, claimed_at) VALUES (1, ?, ?) ON CONFLICT (id) DO NOTHING",
		prefix, ms(time.Now())); err != nil {
		return fmt.Errorf("store: claim key prefix: %w", err)
	}
	return s.CheckKeyPrefix(ctx, prefix)
}

// CheckKeyPrefix returns a *KeyPrefixError if the database belongs to a
// key prefix other than prefix. A database that belongs to none passes,
// and still belongs to none.
func (s *Store) CheckKeyPrefix(ctx context.Context, prefix string) error {
	owner, err := s.KeyPrefix(ctx)
	if err != nil {
		return err
	}
	if owner == "" || owner == prefix {
		return nil
	}
	e := &KeyPrefixError{Owner: owner, Prefix: prefix}
	if s.dialect == Postgres {
		e.Database, e.Separate = fmt.Sprintf("schema %q", s.schema), "schema (--db-schema / Config.DatabaseSchema)"
	} else {
		e.Database, e.Separate = fmt.Sprintf("SQLite file %q", s.file), "database file"
	}
	return e
}

// KeyPrefix returns the key prefix the database belongs to, "" if none yet.
func (s *Store) KeyPrefix(ctx context.Context) (string, error) {
	var prefix string
	err := s.queryRow(ctx, s.db, "SELECT prefix FROM key_prefix WHERE id = 1").Scan(&prefix)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("store: read key prefix: %w", err)
	}
	return prefix, nil
}
