package proxy

import (
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// The audit trail is a few info lines per session (accepted, ready or
// refused, ended), never per message, and never passwords or statement text.

// countingConn counts the bytes a client connection carries: one atomic add
// per read or write system call, which the relay batches anyway.
type countingConn struct {
	net.Conn
	in, out atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out.Add(int64(n))
	return n, err
}

// auditStartupFailure records why a connection ended before ReadyForQuery.
func (s *session) auditStartupFailure(err error) {
	if errors.Is(err, errQuiet) { // CancelRequest (logged by Server.cancel) or closed by the server
		return
	}
	var pe *PgError
	if !errors.As(err, &pe) {
		s.log.Info("connection closed during startup", zap.Duration("duration", time.Since(s.started)), zap.Error(err))
		return
	}
	msg := "session refused"
	if strings.HasPrefix(pe.Code, "28") { // invalid_authorization_specification, invalid_password
		msg = "authentication failed"
	}
	// s.log carries user and database once the startup message was read.
	s.log.Info(msg, zap.String("sqlstate", pe.Code), zap.String("error", pe.Message), zap.Bool("tls", s.clientTLS))
}

func (s *session) auditReady() {
	s.mu.Lock()
	pid := s.realPID
	s.mu.Unlock()
	s.log.Info("session ready", zap.Bool("tls", s.clientTLS), zap.Uint32("backend_pid", pid),
		zap.String("upstream", s.route.Address))
}

func (s *session) auditEnd() {
	s.log.Info("session ended", zap.Duration("duration", time.Since(s.started)),
		zap.Int64("bytes_from_client", s.traffic.in.Load()), zap.Int64("bytes_to_client", s.traffic.out.Load()))
}
