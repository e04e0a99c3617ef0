package workload

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/internal/ownconn"
)

// StatRow is one row of pg_stat_statements: a statement as the server
// normalised it ($n for constants), the role that ran it and how many
// times in all (since the server's statistics were last reset).
type StatRow struct {
	QueryID int64
	Role    string
	Query   string
	Calls   int64
}

// StatsSource reads pg_stat_statements for one database.
type StatsSource interface {
	Statements(ctx context.Context, database string) ([]StatRow, error)
}

// statKey identifies a row across reads.
type statKey struct {
	queryID int64
	role    string
}

type statsBatch struct {
	database string
	rows     []StatRow
	at       time.Time
}

// statsTimeout bounds one read of pg_stat_statements.
const statsTimeout = 30 * time.Second

// readStats reads each database's pg_stat_statements every StatsEvery
// and hands the rows to the worker. A database whose read fails is logged
// once (until a read succeeds again) and counted; learning goes on.
func (c *Collector) readStats(ctx context.Context) {
	tick := time.NewTicker(c.opts.StatsEvery)
	defer tick.Stop()
	warned := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, p := range c.store.Profiles() {
			db := p.Database()
			rctx, cancel := context.WithTimeout(ctx, statsTimeout)
			rows, err := c.opts.Stats.Statements(rctx, db)
			cancel()
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				c.statFailures.Add(1)
				if !warned[db] {
					warned[db] = true
					c.log.Warn("workload: pg_stat_statements not read; learning from relayed statements only",
						zap.String("database", db), zap.Error(err))
				}
				continue
			}
			delete(warned, db)
			c.statReads.Add(1)
			select {
			case c.stats <- statsBatch{database: db, rows: rows, at: time.Now()}:
			case <-ctx.Done():
				return
			}
		}
	}
}

// learnStats learns from one database's rows the calls made since the
// previous read (all of them the first time; a row whose calls went down
// was reset and counts from zero). Rows gone from the view are forgotten.
func (c *Collector) learnStats(b statsBatch) {
	last := c.lastCalls[b.database]
	next := make(map[statKey]int64, len(b.rows))
	for _, r := range b.rows {
		k := statKey{r.QueryID, r.Role}
		next[k] = r.Calls
		delta := r.Calls - last[k]
		if delta < 0 {
			delta = r.Calls
		}
		if delta <= 0 || r.Query == "" {
			continue
		}
		c.learn(observed{database: b.database, role: r.Role, sql: r.Query, at: b.at, runs: delta, fromStats: true})
	}
	c.lastCalls[b.database] = next
	if rc := c.relayed[b.database]; rc != nil {
		rc.age()
	}
}

// PgStatStatements reads pg_stat_statements through connections of the
// catalog role (Connect, one per read). Rows of the connecting role itself
// (the catalog's and this reader's queries) and rows whose text the role
// may not see are left out.
type PgStatStatements struct {
	Connect func(ctx context.Context, database string) (*pgx.Conn, error)
}

// ErrNoStatStatements: pg_stat_statements is not installed in the database.
var ErrNoStatStatements = errors.New("workload: pg_stat_statements is not installed (CREATE EXTENSION pg_stat_statements, with shared_preload_libraries)")

// statSchemaSQL finds the schema holding the extension's view, and checks
// that what is called pg_stat_statements there is the extension's own
// member (of an extension a superuser owns), not a relation a user made.
var statSchemaSQL = `SELECT n.nspname::pg_catalog.text,
  EXISTS (SELECT 1 FROM pg_catalog.pg_class c
          WHERE c.relnamespace = e.extnamespace AND c.relname = 'pg_stat_statements'
            AND ` + ownconn.TrustedObject("'pg_catalog.pg_class'::pg_catalog.regclass", "c.oid") + `)
FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
WHERE e.extname = 'pg_stat_statements'`

// statStatementsSQL reads the view, qualified by the extension's schema
// (%s); everything else is pg_catalog's, qualified.
const statStatementsSQL = `SELECT s.queryid, r.rolname::pg_catalog.text, s.query, s.calls
FROM %s.pg_stat_statements s JOIN pg_catalog.pg_roles r ON r.oid = s.userid
WHERE s.dbid = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
  AND s.userid <> (SELECT u.oid FROM pg_catalog.pg_roles u WHERE u.rolname = CURRENT_USER)
  AND s.query <> '<insufficient privilege>' AND s.queryid IS NOT NULL`

// ErrUntrustedStatStatements: the relation named pg_stat_statements in
// the extension's schema is not the extension's.
var ErrUntrustedStatStatements = errors.New("workload: pg_stat_statements in the extension's schema is not the extension's own view; not read")

// Statements implements StatsSource. It runs in one read-only transaction
// pinned and bounded as internal/ownconn says.
func (s PgStatStatements) Statements(ctx context.Context, database string) ([]StatRow, error) {
	conn, err := s.Connect(ctx, database)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	tx, err := ownconn.BeginRead(ctx, conn, "", ownconn.Bounds{Statement: statsTimeout})
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// The view lives in the schema the extension was created in.
	var (
		schema  string
		trusted bool
	)
	if err := tx.QueryRow(ctx, statSchemaSQL).Scan(&schema, &trusted); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, ErrNoStatStatements
		}
		return nil, err
	}
	if !trusted {
		return nil, ErrUntrustedStatStatements
	}
	rows, err := tx.Query(ctx, fmt.Sprintf(statStatementsSQL, pgx.Identifier{schema}.Sanitize()))
	if err != nil {
		return nil, err
	}
	var out []StatRow
	for rows.Next() {
		var r StatRow
		if err := rows.Scan(&r.QueryID, &r.Role, &r.Query, &r.Calls); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
