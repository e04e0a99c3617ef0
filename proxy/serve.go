package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"go.uber.org/zap"
)

// Serving: accepting connections, running each session (handshake, then a
// relay) and shutting down.

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("proxy: server closed")

// ListenAndServe listens on addr (TCP) and serves.
func (s *Server) ListenAndServe(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("proxy: listen: %w", err)
	}
	return s.Serve(ln)
}

// Serve accepts clients on ln until Shutdown or Close; it then returns ErrServerClosed.
func (s *Server) Serve(ln net.Listener) error {
	if err := s.validate(); err != nil {
		ln.Close()
		return err
	}
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	if s.listeners == nil {
		s.listeners = map[net.Listener]struct{}{}
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
	}()

	var backoff time.Duration
	for {
		conn, err := ln.Accept()
		if err != nil {
			if s.isShutdown() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("proxy: accept: %w", err)
		}
		backoff = 0
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		sess := newSession(s, conn)
		s.mu.Lock()
		if s.shutdown {
			s.mu.Unlock()
			conn.Close()
			return ErrServerClosed
		}
		if s.conns == nil {
			s.conns = map[*session]struct{}{}
		}
		s.conns[sess] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		s.Metrics.ConnAccepted()
		go func() {
			defer s.wg.Done()
			sess.run()
			s.mu.Lock()
			delete(s.conns, sess)
			sess.addTotals(&s.ended)
			s.mu.Unlock()
		}()
	}
}

func (s *Server) validate() error {
	if len(s.Upstreams) == 0 {
		return errors.New("proxy: no upstreams configured")
	}
	defaults := 0
	for _, u := range s.Upstreams {
		if u.Address == "" {
			return fmt.Errorf("proxy: upstream for database %q has no address", u.Database)
		}
		if u.Database == "" {
			defaults++
		}
	}
	if s.RequireTLS && s.TLSConfig == nil {
		return errors.New("proxy: RequireTLS set without a TLSConfig")
	}
	if defaults > 1 {
		return errors.New("proxy: more than one default upstream (Database == \"\")")
	}
	return nil
}

// Shutdown stops accepting, closes idle sessions and lets busy ones finish
// their transaction; when ctx ends the remaining sessions are closed and
// ctx's error is returned.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shutdown = true
	for ln := range s.listeners {
		ln.Close()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		// Re-drain on every tick: sessions still in their handshake become
		// drainable once they reach ReadyForQuery.
		s.mu.Lock()
		all := make([]*session, 0, len(s.conns))
		for c := range s.conns {
			all = append(all, c)
		}
		s.mu.Unlock()
		for _, c := range all {
			c.drain()
		}
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			s.Close()
			<-done
			return fmt.Errorf("proxy: shutdown: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// waitSessions waits until every session goroutine has ended (tests).
func (s *Server) waitSessions() { s.wg.Wait() }

// Close closes the listeners and every session now.
func (s *Server) Close() error {
	s.mu.Lock()
	s.shutdown = true
	for ln := range s.listeners {
		ln.Close()
	}
	all := make([]*session, 0, len(s.conns))
	for c := range s.conns {
		all = append(all, c)
	}
	s.mu.Unlock()
	for _, c := range all {
		c.close()
	}
	return nil
}

func (s *session) run() {
	defer s.close()
	s.log.Info("connection accepted")
	hctx, cancel := context.WithTimeout(s.ctx, s.srv.handshakeTimeout())
	err := s.handshake(hctx)
	cancel()
	if err != nil {
		s.auditStartupFailure(err)
		return
	}
	s.auditReady()
	defer s.auditEnd()
	if !s.loopRelay() {
		return
	}
	s.growBuffers()
	serverDone := make(chan struct{})
	go func() {
		defer close(serverDone)
		s.serverLoop()
	}()
	if err := s.clientLoop(); err != nil && !errors.Is(err, errQuiet) && !s.sh.isClosing() {
		s.log.Debug("client loop ended", zap.Error(err))
	}
	s.close()
	<-serverDone
}
