package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// DefaultSchema is the PostgreSQL schema that holds seckill's tables when
// neither the database URL's search_path nor OpenSchema's schema names
// one: the tables' plain names (orders, sales, journal, ...) then never
// meet an application's own in "public".
const DefaultSchema = "seckill"

// schemaName is what OpenSchema accepts as a schema: a plain lowercase
// identifier, which needs no quoting anywhere.
var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// pickSchema returns the schema a PostgreSQL store works in: the first
// entry of the URL's search_path if it sets one (fromURL), else option,
// else DefaultSchema.
func pickSchema(searchPath, option string) (schema string, fromURL bool, err error) {
	if option != "" && !schemaName.MatchString(option) {
		return "", false, fmt.Errorf("store: schema %q: want a lowercase name of letters, digits and _, at most 63, not starting with a digit", option)
	}
	if searchPath == "" {
		if option == "" {
			return DefaultSchema, false, nil
		}
		return option, false, nil
	}
	first, err := firstInSearchPath(searchPath)
	if err != nil {
		return "", false, err
	}
	if option != "" && option != first {
		return "", false, fmt.Errorf("store: the database URL's search_path names schema %q and the schema option %q: set one of them", first, option)
	}
	return first, true, nil
}

// firstInSearchPath returns the schema a search_path's first entry names,
// as PostgreSQL reads it: folded to lower case unless double-quoted.
func firstInSearchPath(path string) (string, error) {
	path = strings.TrimSpace(path)
	var name string
	if rest, ok := strings.CutPrefix(path, `"`); ok {
		var b strings.Builder
		for i := 0; ; i++ {
			if i == len(rest) {
				return "", fmt.Errorf("store: the database URL's search_path %q has an unclosed quote", path)
			}
			if rest[i] == '"' {
				if i+1 < len(rest) && rest[i+1] == '"' {
					b.WriteByte('"')
					i++
					continue
				}
				break
			}
			b.WriteByte(rest[i])
		}
		name = b.String()
	} else {
		first, _, _ := strings.Cut(path, ",")
		name = strings.ToLower(strings.TrimSpace(first))
	}
	if name == "" || name == "$user" {
		return "", fmt.Errorf("store: the database URL's search_path %q must begin with the name of the schema that holds seckill's tables", path)
	}
	return name, nil
}

// prepareSchema runs before the numbered migrations, in one transaction:
// it creates the store's schema if it is missing and, unless the URL's
// search_path named the schema, moves there the tables an older release
// made in "public" (moveFromPublic).
//
// It holds the migrations' advisory lock of the schema (and first that of
// "public" when it may move from there, always in that order), so two
// instances upgrading at once move the tables once: the second waits for
// the first to commit, then finds them in the schema and moves nothing.
func (s *Store) prepareSchema(ctx context.Context, tx *sql.Tx) error {
	move := s.movePublic && s.schema != "public"
	if move {
		if err := s.lockMigrations(ctx, tx, "public"); err != nil {
			return err
		}
	}
	if err := s.lockMigrations(ctx, tx, s.schema); err != nil {
		return err
	}
	// CREATE SCHEMA IF NOT EXISTS would need the right to create schemas
	// even when the schema is there: a role given a schema made for it has
	// no such right.
	var exists bool
	if err := s.queryRow(ctx, tx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = ?)", s.schema).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		if _, err := s.exec(ctx, tx, "CREATE SCHEMA "+quoteIdent(s.schema)); err != nil {
			return err
		}
	}
	if move {
		return s.moveFromPublic(ctx, tx)
	}
	return nil
}

// lockMigrations takes the migrations' advisory lock of schema until the
// transaction ends.
func (s *Store) lockMigrations(ctx context.Context, tx *sql.Tx, schema string) error {
	_, err := s.exec(ctx, tx, "SELECT pg_advisory_xact_lock(?, hashtext(?))", migrationLockKey, schema)
	return err
}

// moveFromPublic moves to the store's schema what an older release's
// migrations made in "public", if "public" holds our schema_migrations
// (its columns tell it from other tools' tables of that name) and the
// store's schema holds none yet. Which tables and functions are ours is
// what the migrations recorded there created (migration.creates); the rest
// of "public" stays where it is. Indexes, constraints, triggers and the
// sequences of columns go with their tables; a function's search_path is
// set to the new schema.
func (s *Store) moveFromPublic(ctx context.Context, tx *sql.Tx) error {
	var cols []string
	rows, err := s.query(ctx, tx, `SELECT column_name || ' ' || data_type FROM information_schema.columns
		WHERE table_schema = 'public' AND table_name = 'schema_migrations' ORDER BY column_name`)
	if err != nil {
		return err
	}
	if err := scanEach(rows, func() error {
		cols = append(cols, "")
		return rows.Scan(&cols[len(cols)-1])
	}); err != nil {
		return err
	}
	if !slices.Equal(cols, []string{"applied_at bigint", "version integer"}) {
		return nil // none, or another tool's
	}
	var held bool
	if err := s.queryRow(ctx, tx, "SELECT to_regclass(?) IS NOT NULL", quoteIdent(s.schema)+".schema_migrations").Scan(&held); err != nil {
		return err
	}
	if held {
		return nil
	}
	var versions []int
	rows, err = s.query(ctx, tx, "SELECT version FROM public.schema_migrations ORDER BY version")
	if err != nil {
		return err
	}
	if err := scanEach(rows, func() error {
		versions = append(versions, 0)
		return rows.Scan(&versions[len(versions)-1])
	}); err != nil {
		return err
	}
	ms, err := migrations(Postgres)
	if err != nil {
		return err
	}
	objs := []object{{"table", "schema_migrations"}}
	for _, v := range versions {
		i := slices.IndexFunc(ms, func(m migration) bool { return m.version == v })
		if i < 0 {
			return fmt.Errorf("public.schema_migrations records migration %d, which this release does not have; nothing moved", v)
		}
		objs = append(objs, ms[i].creates()...)
	}
	to := quoteIdent(s.schema)
	for _, o := range objs {
		if err := s.moveObject(ctx, tx, o, to); err != nil {
			return fmt.Errorf("move %s %s from public to %s: %w", o.kind, o.name, s.schema, err)
		}
	}
	return nil
}

// moveObject moves one table or function (each of its overloads) from
// "public" to schema to (quoted); one that is not there is skipped.
func (s *Store) moveObject(ctx context.Context, tx *sql.Tx, o object, to string) error {
	name := quoteIdent(o.name)
	switch o.kind {
	case "table":
		var there bool
		if err := s.queryRow(ctx, tx, "SELECT to_regclass(?) IS NOT NULL", "public."+name).Scan(&there); err != nil || !there {
			return err
		}
		_, err := s.exec(ctx, tx, "ALTER TABLE public."+name+" SET SCHEMA "+to)
		return err
	case "function":
		var sigs []string
		rows, err := s.query(ctx, tx, `SELECT pg_get_function_identity_arguments(oid) FROM pg_proc
			WHERE pronamespace = 'public'::regnamespace AND proname = ?`, o.name)
		if err != nil {
			return err
		}
		if err := scanEach(rows, func() error {
			sigs = append(sigs, "")
			return rows.Scan(&sigs[len(sigs)-1])
		}); err != nil {
			return err
		}
		for _, args := range sigs {
			fn := name + "(" + args + ")"
			if _, err := s.exec(ctx, tx, "ALTER FUNCTION public."+fn+" SET SCHEMA "+to); err != nil {
				return err
			}
			// It was made with the search_path it ran under ("public").
			if _, err := s.exec(ctx, tx, "ALTER FUNCTION "+to+"."+fn+" SET search_path = "+to); err != nil {
				return err
			}
		}
		return nil
	}
	return errors.New("unknown kind of object")
}

// object is a table or function a migration creates.
type object struct{ kind, name string }

// createStatement finds the objects a migration file creates: a line that
// begins CREATE TABLE or CREATE FUNCTION (written in lower case, unquoted).
var createStatement = regexp.MustCompile(`(?im)^\s*CREATE\s+(?:OR\s+REPLACE\s+)?(TABLE|FUNCTION)\s+(?:IF\s+NOT\s+EXISTS\s+)?([a-z_][a-z0-9_]*)`)

// creates returns the tables and functions m creates, in file order.
func (m migration) creates() []object {
	var out []object
	for _, g := range createStatement.FindAllStringSubmatch(m.sql, -1) {
		out = append(out, object{kind: strings.ToLower(g[1]), name: g[2]})
	}
	return out
}

func quoteIdent(name string) string { return pgx.Identifier{name}.Sanitize() }
