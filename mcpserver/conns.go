package mcpserver

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/internal/pg"
)

// Identity is who an agent is: a Postgres role, proved by the upstream
// server's own authentication when its session opens.
type Identity struct {
	User     string
	Password string
	Database string
	// Client is where the agent connected from, for the audit log.
	Client string
}

// Connector opens an upstream session as id: the server checks the
// password. nlproxy's own credentials are never used for it.
type Connector func(ctx context.Context, id Identity) (*pgconn.PgConn, error)

// upstream is one role's own session, used by one tool call at a time.
type upstream struct {
	mu   sync.Mutex
	conn *pgconn.PgConn
	id   Identity
	used time.Time // guarded by pool.mu
}

// Trial implements engine.Executor: every run goes through the sealed
// scope (engine.ConnExecutor), one at a time on this session.
func (u *upstream) Trial(ctx context.Context, st guard.Statement, lim pg.Limits) (*pg.Rows, error) {
	return u.run(ctx, st, lim, false)
}

func (u *upstream) run(ctx context.Context, st guard.Statement, lim pg.Limits, truncate bool) (*pg.Rows, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.conn.IsClosed() {
		return nil, &pg.Error{Code: pg.CodeConnectionFailure, Message: "nlproxy: the session to the database was lost; call again"}
	}
	return engine.ConnExecutor{Conn: u.conn, TruncateBytes: truncate}.Trial(ctx, st, lim)
}

// key identifies a session by everything that proved the identity: a
// cached session serves only a call carrying the same password.
type key struct {
	user, database string
	secret         [sha256.Size]byte
}

func keyOf(id Identity) key {
	return key{user: id.User, database: id.Database, secret: sha256.Sum256([]byte(id.User + "\x00" + id.Database + "\x00" + id.Password))}
}

// pool keeps one upstream session per identity, closed after IdleTimeout
// unused. Sessions that went bad are replaced on the next call.
type pool struct {
	connect Connector
	max     int
	idle    time.Duration

	mu     sync.Mutex
	conns  map[key]*upstream
	closed bool
}

var errTooMany = &pg.Error{Code: pg.CodeTooManyConnections, Message: "nlproxy: too many MCP identities connected at once",
	Hint: "Try again later; an operator can raise --mcp-max-sessions."}

// get returns id's session, opening it (and so authenticating) when there
// is none.
func (p *pool) get(ctx context.Context, id Identity) (*upstream, error) {
	k := keyOf(id)
	now := time.Now()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errors.New("mcp: server closed")
	}
	stale := p.staleLocked(now, k)
	u := p.conns[k]
	if u != nil {
		u.used = now
	}
	n := len(p.conns)
	p.mu.Unlock()
	for _, s := range stale {
		go closeConn(s) // after any call still using it, without holding this one up
	}
	if u != nil {
		return u, nil
	}
	if p.max > 0 && n >= p.max {
		return nil, errTooMany
	}
	conn, err := p.connect(ctx, id)
	if err != nil {
		return nil, connectError(err)
	}
	nu := &upstream{conn: conn, id: id, used: now}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		closeConn(nu)
		return nil, errors.New("mcp: server closed")
	}
	if old := p.conns[k]; old != nil { // another call opened one meanwhile
		p.mu.Unlock()
		closeConn(nu)
		return old, nil
	}
	p.conns[k] = nu
	p.mu.Unlock()
	return nu, nil
}

// staleLocked removes and returns the sessions unused for the idle time
// (but keep's) and those that went bad.
func (p *pool) staleLocked(now time.Time, keep key) []*upstream {
	var stale []*upstream
	for k, u := range p.conns {
		if k != keep && now.Sub(u.used) > p.idle || u.conn.IsClosed() {
			stale = append(stale, u)
			delete(p.conns, k)
		}
	}
	return stale
}

// sweep closes idle sessions every idle/2 until done is closed, so that a
// role's session does not outlive its agent's last call for long.
func (p *pool) sweep(done <-chan struct{}) {
	tick := time.NewTicker(max(p.idle/2, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-tick.C:
			p.mu.Lock()
			stale := p.staleLocked(now, key{})
			p.mu.Unlock()
			for _, s := range stale {
				go closeConn(s)
			}
		}
	}
}

func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, u := range conns {
		closeConn(u)
	}
}

func closeConn(u *upstream) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	u.mu.Lock() // after the call using it
	defer u.mu.Unlock()
	_ = u.conn.Close(ctx)
}

// connectError is what an agent is told when its session cannot open: the
// server's own refusal (28P01 for a wrong password) as the server said it.
func connectError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return &pg.Error{Severity: pe.Severity, Code: pe.Code, Message: pe.Message, Detail: pe.Detail, Hint: pe.Hint}
	}
	return &pg.Error{Code: pg.CodeConnectionFailure, Message: "nlproxy: cannot open a session to the database", Err: err}
}

// basicAuth reads HTTP Basic credentials.
func basicAuth(h http.Header) (user, password string, ok bool) {
	v := h.Get("Authorization")
	const prefix = "basic "
	if len(v) < len(prefix) || !strings.EqualFold(v[:len(prefix)], prefix) {
		return "", "", false
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v[len(prefix):]))
	if err != nil {
		return "", "", false
	}
	user, password, ok = strings.Cut(string(b), ":")
	return user, password, ok && user != ""
}

// databaseHeader carries the database the HTTP handler took from the URL
// to the tool calls; the handler replaces whatever a client sent in it.
const databaseHeader = "Nlproxy-Mcp-Database"

// clientHeader likewise carries the client's address.
const clientHeader = "Nlproxy-Mcp-Client"

func identityFromHeader(h http.Header) (Identity, error) {
	user, password, ok := basicAuth(h)
	if !ok {
		return Identity{}, &pg.Error{Code: pg.CodeInvalidAuthorization, Message: "nlproxy: the MCP request carries no HTTP Basic credentials"}
	}
	db := h.Get(databaseHeader)
	if db == "" {
		return Identity{}, fmt.Errorf("mcp: no database for the request")
	}
	return Identity{User: user, Password: password, Database: db, Client: h.Get(clientHeader)}, nil
}
