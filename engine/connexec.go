package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/guard/sealed"
	"github.com/nlproxy/nlproxy/internal/pg"
)

// ConnExecutor is an Executor over a plain pgconn session, for tools, tests
// and benchmarks that drive the engine without the proxy (which supplies its
// own). It follows the same sealed.TrialScope; the statement itself goes
// through the extended protocol (ExecParams), which takes one statement only.
//
// With Role set, Conn is an authenticator's connection (questions across
// databases) and every run takes on Role inside its read-only transaction
// (sealed.TrialScopeAs), so Role's privileges and row-level security apply.
type ConnExecutor struct {
	Conn *pgconn.PgConn
	Role string
	// TruncateBytes keeps the rows that fit in lim.MaxBytes and marks the
	// result Truncated instead of failing with ErrResultTooLarge: for
	// answers shown to a client with their caps (MCP), not trial runs.
	TruncateBytes bool
}

// Trial implements Executor.
func (e ConnExecutor) Trial(ctx context.Context, stmt guard.Statement, lim Limits) (*pg.Rows, error) {
	if stmt.IsZero() {
		return nil, errors.New("engine: empty statement")
	}
	var scope sealed.Scope
	var err error
	if e.Role != "" {
		scope, err = sealed.TrialScopeAs(stmt, pg.TxStatus(e.Conn.TxStatus()), lim.Timeout, e.Role)
	} else {
		scope, err = sealed.TrialScope(stmt, pg.TxStatus(e.Conn.TxStatus()), lim.Timeout)
	}
	if err != nil {
		return nil, err
	}
	run := func(sqls []string) error {
		for _, s := range sqls {
			if _, err := e.Conn.ExecParams(ctx, s, nil, nil, nil, nil).Close(); err != nil {
				return serverError(err)
			}
		}
		return nil
	}
	rows, err := e.target(ctx, scope, stmt, lim, run)
	if err == nil {
		err = run(scope.Exit)
	}
	if pg.TxStatus(e.Conn.TxStatus()) != scope.Start {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		for _, s := range scope.Recover {
			if _, rerr := e.Conn.ExecParams(uctx, s, nil, nil, nil, nil).Close(); rerr != nil {
				return nil, fmt.Errorf("engine: restore the session after a trial run: %w", rerr)
			}
		}
	}
	if err != nil {
		return nil, err
	}
	return rows, nil
}

func (e ConnExecutor) target(ctx context.Context, scope sealed.Scope, stmt guard.Statement, lim Limits, run func([]string) error) (*pg.Rows, error) {
	if err := run(scope.Enter); err != nil {
		return nil, err
	}
	rr := e.Conn.ExecParams(ctx, stmt.SQL(), nil, nil, nil, nil)
	out := &pg.Rows{}
	for _, f := range rr.FieldDescriptions() {
		out.Columns = append(out.Columns, f.Name)
		out.Types = append(out.Types, f.DataTypeOID)
	}
	size := 0
	tooLarge := false
	for rr.NextRow() {
		if lim.MaxRows > 0 && len(out.Values) >= lim.MaxRows {
			out.Truncated = true
			continue
		}
		row := make([]*string, len(rr.Values()))
		for j, v := range rr.Values() {
			size += len(v)
			if v != nil {
				s := string(v)
				row[j] = &s
			}
		}
		if lim.MaxBytes > 0 && size > lim.MaxBytes {
			if e.TruncateBytes {
				out.Truncated = true // size only grows: no later row is kept
				continue
			}
			tooLarge = true
			continue
		}
		out.Values = append(out.Values, row)
	}
	tag, err := rr.Close()
	if err != nil {
		return nil, serverError(err)
	}
	if tooLarge {
		return nil, ErrResultTooLarge
	}
	out.Tag = tag.String()
	return out, nil
}

func serverError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return &pg.Error{Severity: pgErr.Severity, Code: pgErr.Code, Message: pgErr.Message, Detail: pgErr.Detail, Hint: pgErr.Hint, Position: int(pgErr.Position)}
	}
	return err
}
