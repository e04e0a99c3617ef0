package proxy

import (
	"fmt"

	"github.com/nlproxy/nlproxy/internal/pg"
)

const (
	defaultMaxAsks          = 32
	defaultMaxAsksPerClient = 4
)

// acquireAsk counts an ask against the proxy's and the client host's
// limits. An ask holds a model call and trial runs for seconds to minutes,
// so beyond the limits it fails at once rather than queue.
func (s *Server) acquireAsk(host string) (release func(), err *pg.Error) {
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
	case s.asksBy[host] >= per:
		return nil, tooManyAsks(fmt.Sprintf("this client already has %d questions being answered, the limit per client", per))
	}
	if s.asksBy == nil {
		s.asksBy = map[string]int{}
	}
	s.asks++
	s.asksBy[host]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.asks--
		if s.asksBy[host]--; s.asksBy[host] == 0 {
			delete(s.asksBy, host)
		}
	}, nil
}

func tooManyAsks(why string) *pg.Error {
	return &pg.Error{Severity: "ERROR", Code: pg.CodeConfigurationLimitExceeded,
		Message: "nlproxy: too many natural-language questions at once: " + why,
		Hint:    "Wait for an answer and ask again; an operator can raise --max-asks / --max-asks-per-client."}
}
