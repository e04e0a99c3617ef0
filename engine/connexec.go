package engine

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// ConnExecutor is an Executor over a plain pgconn session, for tools, tests and
// benchmarks that drive the engine without the proxy (which supplies its own).
type ConnExecutor struct{ Conn *pgconn.PgConn }

// Query implements Executor.
func (e ConnExecutor) Query(ctx context.Context, sql string, maxRows int) (*Rows, error) {
	results, err := e.Conn.Exec(ctx, sql).ReadAll()
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			return nil, &ServerError{Code: pgErr.Code, Message: pgErr.Message, Detail: pgErr.Detail, Hint: pgErr.Hint, Position: int(pgErr.Position)}
		}
		return nil, err
	}
	last := results[len(results)-1]
	out := &Rows{Tag: last.CommandTag.String()}
	for _, f := range last.FieldDescriptions {
		out.Columns = append(out.Columns, f.Name)
	}
	for i, r := range last.Rows {
		if maxRows > 0 && i == maxRows {
			out.Truncated = true
			break
		}
		row := make([]*string, len(r))
		for j, v := range r {
			if v != nil {
				s := string(v)
				row[j] = &s
			}
		}
		out.Values = append(out.Values, row)
	}
	return out, nil
}
