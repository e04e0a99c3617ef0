// Package ownconn is the one place that says how nlproxy runs anything on
// its own connections: the catalog role (introspection, value index,
// function and view list), the pg_stat_statements reader, the authenticator
// of ask(all) before it takes on an asker's role, and the catalog store.
// It is the twin of guard/sealed, whose scopes do the same for what runs on
// an asker's session.
//
// Every statement there runs
//   - with name resolution pinned: search_path = SearchPath (pg_catalog
//     first, pg_temp last; functions and operators are never looked up in
//     pg_temp), and every relation and function the proxy writes is
//     schema-qualified or resolved by OID;
//   - in a READ ONLY transaction (the store's writes excepted: they go to the
//     store's own schema only), bounded by statement_timeout and
//     lock_timeout;
//   - without invoking a function that is neither built in nor a member of
//     an extension a superuser owns (TrustedObject): no user's cast,
//     operator, view, type I/O or policy expression.
//
// The pins are set twice: as startup parameters of every connection the
// proxy opens for itself (Configure), so nothing before the first BEGIN
// resolves through a user's schema, and again inside each transaction
// (BeginRead, BeginWrite, PinLocal), so a connection handed in by a caller
// (the catalog subcommands, tests) is pinned too.
package ownconn

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// SearchPath is the search_path of every statement on the proxy's own
// connections. pg_temp is named last so that it is not searched first for
// relations and types (left out, it would be).
const SearchPath = "pg_catalog, pg_temp"

// FirstNormalObjectID is PostgreSQL's FirstNormalObjectId: every object
// initdb creates (built-in functions, operators, types, casts, the system
// views) has a smaller OID, every object created afterwards a larger one.
const FirstNormalObjectID = 16384

// Bounds limit each statement.
type Bounds struct {
	Statement time.Duration // statement_timeout (default 30s)
	Lock      time.Duration // lock_timeout (default 5s): DDL holding a lock must not stall a refresh
}

func (b Bounds) withDefaults() Bounds {
	if b.Statement <= 0 {
		b.Statement = 30 * time.Second
	}
	if b.Lock <= 0 {
		b.Lock = 5 * time.Second
	}
	return b
}

func millis(d time.Duration) string { return strconv.FormatInt(max(d.Milliseconds(), 1), 10) }

// Mode says whether a connection may write.
type Mode int

const (
	// Read is every connection but the store's: transactions are READ ONLY
	// by default.
	Read Mode = iota
	// Write is the catalog store's: it writes its own schema.
	Write
)

// Params are the startup parameters of a connection the proxy opens for
// itself. Startup parameters take precedence over ALTER ROLE/DATABASE … SET,
// so neither the database owner nor the role can move the pins.
func Params(mode Mode, b Bounds) map[string]string {
	b = b.withDefaults()
	p := map[string]string{
		"search_path":       SearchPath,
		"statement_timeout": millis(b.Statement),
		"lock_timeout":      millis(b.Lock),
	}
	if mode == Read {
		p["default_transaction_read_only"] = "on"
	}
	return p
}

// Configure sets Params on cfg (a *pgx.ConnConfig's or a pool's Config).
func Configure(cfg *pgconn.Config, mode Mode, b Bounds) {
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	for k, v := range Params(mode, b) {
		cfg.RuntimeParams[k] = v
	}
}

// PinLocal is the statement that pins the current transaction until it
// ends: search_path, statement_timeout and lock_timeout. It is fixed ASCII
// text but for two numbers, fully qualified, and uses set_config rather
// than SET LOCAL so it may run as an ordinary (extended-protocol) query.
func PinLocal(b Bounds) string {
	b = b.withDefaults()
	return "SELECT pg_catalog.set_config('search_path', '" + SearchPath + "', true), " +
		"pg_catalog.set_config('statement_timeout', '" + millis(b.Statement) + "', true), " +
		"pg_catalog.set_config('lock_timeout', '" + millis(b.Lock) + "', true)"
}

// Beginner begins transactions: *pgx.Conn, *pgxpool.Pool, pgx.Tx.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// BeginRead begins a READ ONLY transaction at iso (pgx.ReadCommitted when
// empty) and pins it.
func BeginRead(ctx context.Context, c Beginner, iso pgx.TxIsoLevel, b Bounds) (pgx.Tx, error) {
	return begin(ctx, c, pgx.TxOptions{IsoLevel: iso, AccessMode: pgx.ReadOnly}, b)
}

// BeginWrite begins a read-write transaction and pins it: the catalog
// store's, whose statements write its own schema and name it qualified.
func BeginWrite(ctx context.Context, c Beginner, b Bounds) (pgx.Tx, error) {
	return begin(ctx, c, pgx.TxOptions{AccessMode: pgx.ReadWrite}, b)
}

func begin(ctx context.Context, c Beginner, opts pgx.TxOptions, b Bounds) (pgx.Tx, error) {
	tx, err := c.BeginTx(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	if _, err := tx.Exec(ctx, PinLocal(b)); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("pin: %w", err)
	}
	return tx, nil
}

// TrustedObject is a boolean SQL expression: the object of class classOID
// (an SQL expression such as 'pg_catalog.pg_proc'::pg_catalog.regclass)
// with OID oid (an SQL expression) is built in, or a member of an extension
// whose own owner is a superuser. A trusted extension (citext, since 13)
// can be created by any role allowed to CREATE in the database; that role
// then owns the extension and may ALTER EXTENSION … ADD its own function to
// it, so membership alone does not make a function trusted, but membership
// of a superuser's extension does.
func TrustedObject(classOID, oid string) string {
	return "(" + oid + " OPERATOR(pg_catalog.<) " + strconv.Itoa(FirstNormalObjectID) + "::pg_catalog.oid OR EXISTS (" +
		"SELECT 1 FROM pg_catalog.pg_depend dep JOIN pg_catalog.pg_extension ext ON ext.oid OPERATOR(pg_catalog.=) dep.refobjid " +
		"JOIN pg_catalog.pg_roles own ON own.oid OPERATOR(pg_catalog.=) ext.extowner " +
		"WHERE dep.classid OPERATOR(pg_catalog.=) " + classOID + " AND dep.objid OPERATOR(pg_catalog.=) " + oid +
		" AND dep.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass" +
		" AND dep.deptype OPERATOR(pg_catalog.=) 'e' AND own.rolsuper))"
}
