package proxy

import (
	"slices"
	"time"

	"github.com/nlproxy/nlproxy/internal/metrics"
)

// RelayTotals sums the relay counters of live and ended sessions; it is
// read when metrics are scraped, never on the relay path.
func (s *Server) RelayTotals() metrics.RelayTotals {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.ended
	for sess := range s.conns {
		sess.addTotals(&t)
	}
	t.Connections = len(s.conns)
	return t
}

// addTotals adds the session's counters to t.
func (s *session) addTotals(t *metrics.RelayTotals) {
	t.BytesFromClients += uint64(s.traffic.in.Load())
	t.BytesToClients += uint64(s.traffic.out.Load())
	t.MessagesFromClients += s.sig.msgsIn.Load()
	t.MessagesToClients += s.sig.msgsOut.Load()
	t.Transactions += s.sh.transactions()
}

// SessionInfo describes one client connection (admin page).
type SessionInfo struct {
	Client     string // address, "[local]" on a Unix socket
	User       string
	Database   string
	Started    time.Time
	TLS        bool
	Ready      bool   // past authentication
	TxStatus   string // idle, transaction, failed
	Asking     bool   // a question is being translated
	BackendPID uint32
	BytesIn    int64 // from the client
	BytesOut   int64 // to the client
}

// Sessions lists the client connections open now, oldest first.
func (s *Server) Sessions() []SessionInfo {
	s.mu.Lock()
	all := make([]*session, 0, len(s.conns))
	for c := range s.conns {
		all = append(all, c)
	}
	s.mu.Unlock()
	out := make([]SessionInfo, 0, len(all))
	for _, c := range all {
		st := c.sh.status()
		info := SessionInfo{
			Client: c.clientAddr, Started: c.started, Ready: st.ready, Asking: st.translating, BackendPID: st.pid,
			TxStatus: txName(st.tx),
		}
		if st.ready {
			// user, database and clientTLS are written by the handshake,
			// before ready is set under the shared lock.
			info.User, info.Database, info.TLS = c.user, c.database, c.clientTLS
		}
		info.BytesIn, info.BytesOut = c.traffic.in.Load(), c.traffic.out.Load()
		out = append(out, info)
	}
	sortSessions(out)
	return out
}

func sortSessions(v []SessionInfo) {
	slices.SortFunc(v, func(a, b SessionInfo) int { return a.Started.Compare(b.Started) })
}

func txName(b byte) string {
	switch b {
	case txInTx:
		return "transaction"
	case txFailed:
		return "failed"
	}
	return "idle"
}

// ShuttingDown reports whether Shutdown or Close was called (readiness:
// a load balancer should stop sending clients while sessions drain).
func (s *Server) ShuttingDown() bool { return s.isShutdown() }
