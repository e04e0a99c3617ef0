package proxy

import (
	"net"
	"syscall"
	"time"
)

// defaultBlockingSessions is the most sessions for which blocking mode is
// used when Server.BlockingSessions is 0.
const defaultBlockingSessions = 4

// Blocking mode. Through the netpoller a relayed message costs the relay
// goroutine a read that fails with EAGAIN, a park, an epoll_wait that finds
// it ready and often a futex wake-up of another thread. While few sessions
// are open it is cheaper to put their sockets in blocking mode: each relay
// goroutine then sleeps in read(2) on its own OS thread and the kernel wakes
// that thread when bytes arrive, one read and one write per message in each
// direction. Each such session holds two threads, and with many sessions
// the threads crowd the CPUs (measured: slower at 16 clients on 2 cores),
// so the mode is on for every eligible session while at most
// Server.BlockingSessions sessions are established, and off for all of them
// above that. Switching is safe at any time: O_NONBLOCK only decides how the
// next read or write waits.
//
// Deadlines do not work on a blocking socket, so the mode is used only when
// no idle timeout is configured, and only on plain TCP or Unix sockets (TLS
// keeps its state in user space around the socket). close() turns the
// sockets non-blocking again and shuts the client's down, which wakes a
// thread blocked on it; the upstream's is shut down after the Terminate.

// blockState is a session's part in blocking mode; guarded by Server.mu.
type blockState struct {
	client, up syscall.RawConn // nil: not eligible (TLS, timeouts, closed)
	on         bool
	registered bool // counted in Server.established
	closed     bool // leaveEstablished ran: never register again
}

func (s *Server) blockingLimit() int {
	switch {
	case s.BlockingSessions < 0:
		return 0
	case s.BlockingSessions == 0:
		return defaultBlockingSessions
	}
	return s.BlockingSessions
}

// enterEstablished counts an established session and, when its sockets
// allow, makes it eligible for blocking mode.
func (s *session) enterEstablished() {
	srv := s.srv
	var client, up syscall.RawConn
	if srv.blockingLimit() > 0 && srv.IdleTimeout <= 0 && srv.IdleInTransactionTimeout <= 0 && !s.clientTLS {
		s.mu.Lock()
		upConn, closing := s.upConn, s.closing
		s.mu.Unlock()
		c, ok1 := rawConn(s.traffic.Conn)
		u, ok2 := rawConn(upConn)
		if ok1 && ok2 && !closing {
			client, up = c, u
		}
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if s.block.closed {
		return
	}
	s.block.client, s.block.up = client, up
	s.block.registered = true
	srv.established++
	srv.rebalanceBlocking()
}

// leaveEstablished undoes enterEstablished as the session closes: the
// sockets turn non-blocking again (so the Terminate write honours its
// deadline) and the client's is shut down, waking a thread blocked on it.
// It returns the upstream socket to shut down after the Terminate, if any.
func (s *session) leaveEstablished() syscall.RawConn {
	srv := s.srv
	srv.mu.Lock()
	client, up, on, registered := s.block.client, s.block.up, s.block.on, s.block.registered
	s.block = blockState{closed: true}
	if registered {
		srv.established--
	}
	if on {
		srv.blocking--
	}
	if registered {
		srv.rebalanceBlocking()
	}
	srv.mu.Unlock()
	if client == nil {
		return nil
	}
	_ = setNonblock(up, true)
	_ = setNonblock(client, true)
	shutdown(client)
	return up
}

// rebalanceBlocking turns blocking mode on for every eligible session while
// at most the limit are established, off for all above it. Server.mu held.
func (srv *Server) rebalanceBlocking() {
	want := srv.established <= srv.blockingLimit()
	if !want && srv.blocking == 0 {
		return
	}
	for sess := range srv.conns {
		b := &sess.block
		if b.client == nil || b.on == want {
			continue
		}
		if setNonblock(b.client, !want) != nil || setNonblock(b.up, !want) != nil {
			// Leave it as the netpoller expects; it stays off from now on.
			_ = setNonblock(b.client, true)
			_ = setNonblock(b.up, true)
			if b.on {
				srv.blocking--
			}
			b.on, b.client, b.up = false, nil, nil
			continue
		}
		b.on = want
		if want {
			srv.blocking++
		} else {
			srv.blocking--
		}
	}
}

func rawConn(c net.Conn) (syscall.RawConn, bool) {
	switch c := c.(type) {
	case *net.TCPConn:
		r, err := c.SyscallConn()
		return r, err == nil
	case *net.UnixConn:
		r, err := c.SyscallConn()
		return r, err == nil
	}
	return nil, false
}

// terminateWait bounds the Terminate write at close.
const terminateWait = 100 * time.Millisecond
