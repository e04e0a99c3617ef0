package proxy

import (
	"fmt"

	"github.com/nlproxy/nlproxy/internal/pg"
)

const (
	defaultMaxAsks          = 32
	defaultMaxAsksPerClient = 4
)

// acquireAsk counts an ask against the proxy's limit and the limit of one
// user on one client host. An ask holds a model call and trial runs for
// seconds to minutes, so beyond the limits it fails at once rather than
// queue. The per-client count is keyed by the login role as well as the
// host: behind one application server or BI host many people ask, and one
// of them holding slow asks must not lock out the others.
func (s *Server) acquireAsk(user, host string) (release func(), err *PgError) {
	key := clientKey(user, host)
	total, per := s.MaxAsks, s.MaxAsksPerClient
	if total <= 0 {
		total = defaultMaxAsks
	}
	if per <= 0 {
		per = defaultMaxAsksPerClient
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.asks >= total:
		return nil, tooManyAsks(fmt.Sprintf("the proxy is answering %d questions, its limit", total))
	case s.asksBy[key] >= per:
		return nil, tooManyAsks(fmt.Sprintf("role %q already has %d questions being answered from this client host, the limit per client", user, per))
	}
	if s.asksBy == nil {
		s.asksBy = map[string]int{}
	}
	s.asks++
	s.asksBy[key]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.asks--
		if s.asksBy[key]--; s.asksBy[key] == 0 {
			delete(s.asksBy, key)
		}
	}, nil
}

func tooManyAsks(why string) *PgError {
	return &PgError{Severity: "ERROR", Code: pg.CodeConfigurationLimitExceeded,
		Message: "nlproxy: too many natural-language questions at once: " + why,
		Hint:    "Wait for an answer and ask again; an operator can raise --max-asks / --max-asks-per-client."}
}

// clientKey is what MaxAsksPerClient counts by: the login role on one client
// host (a NUL cannot occur in either).
func clientKey(user, host string) string { return user + "\x00" + host }
