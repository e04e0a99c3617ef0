package workload

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
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

const statStatementsSQL = `SELECT s.queryid, r.rolname, s.query, s.calls
FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid
WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND s.userid <> (SELECT oid FROM pg_roles WHERE rolname = current_user)
  AND s.query <> '<insufficient privilege>' AND s.queryid IS NOT NULL`

// Statements implements StatsSource.
func (s PgStatStatements) Statements(ctx context.Context, database string) ([]StatRow, error) {
	conn, err := s.Connect(ctx, database)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	// The view lives in the schema the extension was created in.
	var schema *string
	if err := conn.QueryRow(ctx, `SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_stat_statements'`).Scan(&schema); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, ErrNoStatStatements
		}
		return nil, err
	}
	if _, err := conn.Exec(ctx, `SELECT set_config('search_path', $1, false)`, pgx.Identifier{*schema}.Sanitize()+", pg_catalog"); err != nil {
		return nil, err
	}
	rows, err := conn.Query(ctx, statStatementsSQL)
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
