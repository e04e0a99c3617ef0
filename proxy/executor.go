package proxy

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgproto3"
)

// ErrExecutorClosed is returned by Executor.Query outside a translation or
// after the session closed.
var ErrExecutorClosed = errors.New("proxy: executor not available (no translation in progress or session closed)")

// executor runs engine queries on the session's upstream connection. It is
// only usable while the session's client goroutine is inside Translate, so it
// owns the upstream writer; the server goroutine hands it replies.
type executor struct{ s *session }

func (e *executor) Query(ctx context.Context, sql string, maxRows int) (*QueryResult, error) {
	s := e.s
	s.execMu.Lock()
	defer s.execMu.Unlock()
	ch := make(chan frame, 16)
	s.mu.Lock()
	if !s.translating || s.closing {
		s.mu.Unlock()
		return nil, ErrExecutorClosed
	}
	s.capture = ch
	s.capturing.Store(true)
	s.unitsSent++
	s.mu.Unlock()
	if _, err := s.uw.Write(queryMsg(sql)); err != nil {
		return nil, err
	}
	s.uw.boundary()
	if err := s.uw.Flush(); err != nil {
		return nil, err
	}

	res := &QueryResult{}
	var pgErr *PgError
	done := ctx.Done()
	for {
		select {
		case f := <-ch:
			switch f.typ {
			case 'T':
				var rd pgproto3.RowDescription
				if err := rd.Decode(f.body); err != nil {
					continue
				}
				res = &QueryResult{Columns: make([]string, len(rd.Fields))}
				for i, fd := range rd.Fields {
					res.Columns[i] = string(fd.Name)
				}
			case 'D':
				if len(res.Rows) >= maxRows {
					res.Truncated = true
					continue
				}
				var dr pgproto3.DataRow
				if err := dr.Decode(f.body); err != nil {
					continue
				}
				row := make([]*string, len(dr.Values))
				for i, v := range dr.Values {
					if v != nil {
						str := string(v)
						row[i] = &str
					}
				}
				res.Rows = append(res.Rows, row)
			case 'C':
				if len(f.body) > 0 {
					res.Tag = string(f.body[:len(f.body)-1])
				}
			case 'E':
				if pgErr == nil {
					pgErr = pgErrorFromBody(f.body)
				}
			case 'G', 'W': // COPY FROM STDIN: refuse, the engine has no data to send
				msg := appendMsg(nil, 'f', append([]byte("nlproxy: COPY FROM STDIN is not supported in engine queries"), 0))
				if _, err := s.uw.Write(msg); err != nil {
					return nil, err
				}
				if err := s.uw.Flush(); err != nil {
					return nil, err
				}
			case 'Z':
				if pgErr != nil {
					return nil, pgErr
				}
				return res, nil
			}
		case <-done:
			// Cancel upstream, then keep reading until ReadyForQuery so the
			// session stays in sync.
			done = nil
			go func() { _ = s.cancelUpstream(context.WithoutCancel(ctx)) }()
		case <-s.ctx.Done():
			return nil, ErrExecutorClosed
		}
	}
}
