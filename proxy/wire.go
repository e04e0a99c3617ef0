package proxy

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/nlproxy/nlproxy/internal/pg"
)

const terminateMsg = "X\x00\x00\x00\x04"

// sentinelSQL is sent upstream in place of a failed marker statement so that
// Postgres produces an error at exactly that point of the stream (ordering,
// skip-until-Sync and transaction status stay Postgres's own); the proxy then
// replaces that error with its own.
const sentinelSQL = "nlproxy_marker_failed"

// outBuf buffers writes to the upstream; the relay flushes it when the
// client has nothing more buffered, so messages travel in batches.
type outBuf struct {
	w   io.Writer
	buf []byte
}

func newOutBuf(w io.Writer, size int) *outBuf {
	return &outBuf{w: w, buf: make([]byte, 0, size)}
}

func (o *outBuf) Write(p []byte) (int, error) {
	if len(o.buf)+len(p) > cap(o.buf) {
		if err := o.Flush(); err != nil {
			return 0, err
		}
		if len(p) >= cap(o.buf) {
			return o.w.Write(p)
		}
	}
	o.buf = append(o.buf, p...)
	return len(p), nil
}

func (o *outBuf) Flush() error {
	if len(o.buf) == 0 {
		return nil
	}
	_, err := o.w.Write(o.buf)
	o.buf = o.buf[:0]
	return err
}

// relayN copies n bytes from r to w without allocating, calling flush before
// any read that would block, so data never waits in a buffer while we wait.
func relayN(r *bufio.Reader, w io.Writer, n int, flush func() error) error {
	for n > 0 {
		k := r.Buffered()
		if k == 0 {
			if err := flush(); err != nil {
				return err
			}
			if _, err := r.Peek(1); err != nil {
				return err
			}
			k = r.Buffered()
		}
		if k > n {
			k = n
		}
		b, _ := r.Peek(k)
		if _, err := w.Write(b); err != nil {
			return err
		}
		_, _ = r.Discard(k)
		n -= k
	}
	return nil
}

// readFrame reads one whole typed message, copying it (slow path only).
func readFrame(r *bufio.Reader, max int) (typ byte, body []byte, err error) {
	hdr, err := r.Peek(5)
	if err != nil {
		return 0, nil, err
	}
	typ = hdr[0]
	n := int(int32(binary.BigEndian.Uint32(hdr[1:]))) - 4
	if n < 0 || (max > 0 && n > max) {
		return 0, nil, fmt.Errorf("%w: invalid message length %d for type %q", ErrProtocol, n+4, typ)
	}
	_, _ = r.Discard(5)
	body = make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, err
	}
	return typ, body, nil
}

func appendMsg(dst []byte, typ byte, body []byte) []byte {
	dst = append(dst, typ, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(dst[len(dst)-4:], uint32(len(body)+4))
	return append(dst, body...)
}

func encodeError(e *pg.Error) []byte {
	sev := e.Severity
	if sev == "" {
		sev = "ERROR"
	}
	b, _ := (&pgproto3.ErrorResponse{
		Severity: sev, SeverityUnlocalized: sev, Code: e.Code,
		Message: e.Message, Detail: e.Detail, Hint: e.Hint,
	}).Encode(nil)
	return b
}

func encodeNotice(msg string) []byte {
	b, _ := (&pgproto3.NoticeResponse{
		Severity: "NOTICE", SeverityUnlocalized: "NOTICE", Code: pg.CodeSuccessfulCompletion, Message: msg,
	}).Encode(nil)
	return b
}

func pgErrorFromBody(body []byte) *pg.Error {
	var er pgproto3.ErrorResponse
	if err := er.Decode(body); err != nil {
		return &pg.Error{Severity: "ERROR", Code: pg.CodeInternalError, Message: "undecodable ErrorResponse"}
	}
	sev := er.SeverityUnlocalized
	if sev == "" {
		sev = er.Severity
	}
	return &pg.Error{Severity: sev, Code: er.Code, Message: er.Message, Detail: er.Detail, Hint: er.Hint, Position: int(er.Position)}
}

// queryMsg encodes a simple Query.
func queryMsg(sql string) []byte {
	b := make([]byte, 0, len(sql)+6)
	b = append(b, feQuery, 0, 0, 0, 0)
	b = append(b, sql...)
	b = append(b, 0)
	binary.BigEndian.PutUint32(b[1:], uint32(len(b)-1))
	return b
}

// parseMsg encodes a Parse with the given name, query and raw parameter-type tail.
func parseMsg(name, sql string, paramTail []byte) []byte {
	b := make([]byte, 0, len(name)+len(sql)+len(paramTail)+7)
	b = append(b, feParse, 0, 0, 0, 0)
	b = append(b, name...)
	b = append(b, 0)
	b = append(b, sql...)
	b = append(b, 0)
	b = append(b, paramTail...)
	binary.BigEndian.PutUint32(b[1:], uint32(len(b)-1))
	return b
}

// splitParse splits a Parse body into statement name, query text and the
// parameter-type tail.
func splitParse(body []byte) (name, query string, tail []byte, err error) {
	name, rest, ok := cstring(body)
	if !ok {
		return "", "", nil, fmt.Errorf("%w: malformed Parse", ErrProtocol)
	}
	query, rest, ok = cstring(rest)
	if !ok || len(rest) < 2 {
		return "", "", nil, fmt.Errorf("%w: malformed Parse", ErrProtocol)
	}
	return name, query, rest, nil
}

var syncMsg = []byte{feSync, 0, 0, 0, 4}

// mustEncode encodes a message whose fields the proxy controls.
func mustEncode(m interface{ Encode([]byte) ([]byte, error) }) []byte {
	b, err := m.Encode(nil)
	if err != nil {
		panic(fmt.Sprintf("proxy: encode %T: %v", m, err))
	}
	return b
}

func closeMsg(kind byte, name string) []byte {
	return mustEncode(&pgproto3.Close{ObjectType: kind, Name: name})
}

// bindMsg binds portal to stmt with no parameters and text results.
func bindMsg(portal, stmt string) []byte {
	return mustEncode(&pgproto3.Bind{DestinationPortal: portal, PreparedStatement: stmt})
}

func describeMsg(kind byte, name string) []byte {
	return mustEncode(&pgproto3.Describe{ObjectType: kind, Name: name})
}

func executeMsg(portal string, maxRows int) []byte {
	return mustEncode(&pgproto3.Execute{Portal: portal, MaxRows: uint32(max(maxRows, 0))})
}
