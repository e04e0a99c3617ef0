package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/internal/ownconn"
	"github.com/nlproxy/nlproxy/internal/pg"
)

// catalogConnector opens catalog connections to the upstream that serves a
// database, with the catalog role's credentials when --catalog-dsn gives them.
func catalogConnector(cfg Config) (func(ctx context.Context, database string) (*pgx.Conn, error), error) {
	cc, err := newCatalogConns(cfg)
	if err != nil {
		return nil, err
	}
	return cc.connect, nil
}

// catalogConns builds catalog connection configs: server, TLS and routing
// from the upstream entries; user and password from --catalog-dsn (or the
// upstream URL when it is not set).
type catalogConns struct {
	routes map[string]catalogRoute // by startup database; "" is the default route
	creds  string                  // --catalog-dsn, or "" for each route's own URL
}

type catalogRoute struct {
	url  string
	base *pgx.ConnConfig
}

func newCatalogConns(cfg Config) (*catalogConns, error) {
	cc := &catalogConns{routes: map[string]catalogRoute{}, creds: cfg.Engine.CatalogDSN}
	if cc.creds != "" {
		if _, err := pgx.ParseConfig(cc.creds); err != nil {
			return nil, fmt.Errorf("catalog-dsn: %w", err)
		}
	}
	for _, u := range cfg.Upstreams {
		c, err := pgx.ParseConfig(u.URL)
		if err != nil {
			return nil, fmt.Errorf("upstream %q: %w", formatUpstream(u), err)
		}
		cc.routes[u.Database] = catalogRoute{url: u.URL, base: c}
	}
	return cc, nil
}

// config is the connection config for database: the routed upstream (or the
// default one, with the database name passed through), as the catalog role.
// The password is resolved for that exact server, database and role, the
// way libpq does: a password in the DSN, else PGPASSWORD, else the matching
// line of the password file (passfile=, PGPASSFILE or ~/.pgpass). Resolving
// it once for --catalog-dsn alone would look up the wrong host and database.
func (cc *catalogConns) config(database string) (*pgx.ConnConfig, error) {
	r, routed := cc.routes[database]
	if !routed {
		r = cc.routes[""]
	}
	if r.base == nil {
		return nil, fmt.Errorf("no upstream serves database %q", database)
	}
	c := r.base.Copy()
	if !routed {
		c.Database = database // the default route passes the database name through
	}
	src := cc.creds
	if src == "" {
		src = r.url
	}
	creds, err := pgx.ParseConfig(withTarget(src, c.Host, c.Port, c.Database))
	if err != nil {
		return nil, fmt.Errorf("catalog credentials: %w", err)
	}
	c.User, c.Password = creds.User, creds.Password
	c.RuntimeParams["application_name"] = "nlproxy-catalog"
	return c, nil
}

// connect opens a catalog connection: the proxy's own, so pinned and
// read-only from its startup on (internal/ownconn).
func (cc *catalogConns) connect(ctx context.Context, database string) (*pgx.Conn, error) {
	c, err := cc.config(database)
	if err != nil {
		return nil, err
	}
	ownconn.Configure(&c.Config, ownconn.Read, ownconn.Bounds{})
	return pgx.ConnectConfig(ctx, c)
}

// withTarget points a libpq URL or keyword/value DSN at host, port and
// database, keeping everything else (user, password, passfile, …). Both
// forms let a later setting win: URL query parameters override the
// authority, and a repeated keyword replaces the earlier one.
func withTarget(dsn, host string, port uint16, database string) string {
	p := strconv.Itoa(int(port))
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		return dsn + sep + "host=" + uriEscape(host) + "&port=" + p + "&dbname=" + uriEscape(database)
	}
	quote := func(s string) string {
		return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
	}
	return strings.TrimSpace(dsn) + " host=" + quote(host) + " port=" + p + " dbname=" + quote(database)
}

// uriEscape percent-encodes all but RFC 3986's unreserved characters; libpq
// URI parameters know no '+' for a space.
func uriEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// catalogProbeTimeout bounds each start-up check: long enough for a remote
// server, short enough that a firewall dropping packets is reported promptly.
const catalogProbeTimeout = 10 * time.Second

// checkCatalogAccess tries the catalog connection once per configured
// upstream and logs, for each, whether the catalog role can connect and read
// the schema — and when it cannot, what to fix. Natural-language questions
// need the catalog; plain SQL is relayed either way, so nothing here stops
// the proxy. It returns the number of upstreams with a problem.
func checkCatalogAccess(ctx context.Context, cfg Config, logger *zap.Logger) int {
	cc, err := newCatalogConns(cfg)
	if err != nil {
		logger.Warn("natural-language questions will fail: bad catalog connection settings", zap.Error(err))
		return len(cfg.Upstreams)
	}
	problems := 0
	for _, u := range cfg.Upstreams {
		database := u.Database
		if database == "" {
			database = cc.routes[""].base.Database
		}
		if !probeCatalog(ctx, cc, database, logger) {
			problems++
		}
	}
	return problems
}

func probeCatalog(ctx context.Context, cc *catalogConns, database string, logger *zap.Logger) bool {
	c, err := cc.config(database)
	if err != nil {
		logger.Warn("natural-language questions will fail", zap.String("database", database), zap.Error(err))
		return false
	}
	log := logger.With(zap.String("database", database), zap.String("role", c.User),
		zap.String("server", net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port)))))
	ctx, cancel := context.WithTimeout(ctx, catalogProbeTimeout)
	defer cancel()
	ownconn.Configure(&c.Config, ownconn.Read, ownconn.Bounds{Statement: catalogProbeTimeout})
	conn, err := pgx.ConnectConfig(ctx, c)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return true // shutting down, not a finding
		}
		log.Warn("catalog role cannot connect; natural-language questions on this database will fail until fixed (plain SQL is unaffected)",
			zap.Error(err), zap.String("fix", connectFix(err, c.User)))
		return false
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// Relations outside the system schemas, and how many of them the role
	// may read: what introspection and the value index will see.
	var readable, total int
	err = conn.QueryRow(ctx, `
SELECT pg_catalog.count(*) FILTER (WHERE pg_catalog.has_schema_privilege(n.oid, 'USAGE')
                          AND (pg_catalog.has_table_privilege(c.oid, 'SELECT') OR pg_catalog.has_any_column_privilege(c.oid, 'SELECT'))),
       pg_catalog.count(*)
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname NOT LIKE 'pg\_toast%' AND n.nspname NOT LIKE 'pg\_temp\_%'`).Scan(&readable, &total)
	switch {
	case err != nil:
		log.Warn("catalog role connected but cannot read the schema; natural-language questions on this database will fail",
			zap.Error(err), zap.String("fix", "let the catalog role read pg_catalog (the default), or set --catalog-dsn to a role that can"))
		return false
	case total > 0 && readable == 0:
		log.Warn("the catalog role can read none of the database's tables; questions will find no schema",
			zap.Int("tables", total),
			zap.String("fix", fmt.Sprintf("GRANT USAGE ON SCHEMA … and GRANT SELECT ON ALL TABLES IN SCHEMA … TO %s, or set --catalog-dsn to a role that can read them",
				pgx.Identifier{c.User}.Sanitize())))
		return false
	}
	if readable < total {
		// Not a failure (a catalog may be meant to see part of a
		// database), but tables created after the grants are the usual
		// cause.
		log.Warn("the catalog role cannot read some of the database's tables; questions will not see them",
			zap.Int("tables_unreadable", total-readable), zap.Int("tables_readable", readable), zap.Int("tables", total),
			zap.String("fix", fmt.Sprintf("GRANT SELECT ON the tables TO %[1]s; for tables created later, ALTER DEFAULT PRIVILEGES FOR ROLE <owner> IN SCHEMA … GRANT SELECT ON TABLES TO %[1]s",
				pgx.Identifier{c.User}.Sanitize())))
		return true
	}
	log.Info("catalog role can connect and read the schema", zap.Int("tables_readable", readable), zap.Int("tables", total))
	return true
}

// connectFix says what to change when the catalog role cannot connect.
func connectFix(err error, role string) string {
	var pe *pgconn.PgError
	code := ""
	if errors.As(err, &pe) {
		code = pe.Code
	}
	switch {
	case code == pg.CodeInvalidPassword || strings.Contains(err.Error(), "password") || strings.Contains(err.Error(), "SASL"):
		return fmt.Sprintf("give the catalog role %q its password: --catalog-dsn 'postgres://%s:PASSWORD@host/db' (or NLPROXY_CATALOG_DSN), "+
			"a line 'host:port:database:%s:PASSWORD' in ~/.pgpass or the file PGPASSFILE names (mode 0600), or PGPASSWORD", role, role, role)
	case code == pg.CodeInvalidAuthorization:
		return fmt.Sprintf("the server refused role %q (no such role, or no pg_hba.conf entry for it from this host): create it or set --catalog-dsn to one that may connect", role)
	case code == pg.CodeInvalidCatalogName:
		return "the database does not exist on that server: check the --upstream route"
	default:
		return "check that the server is reachable from here and --upstream / --catalog-dsn are right"
	}
}
