// Package admin serves nlproxy's operator endpoints on their own listener:
// Prometheus metrics, liveness and readiness for load balancers, and a
// token-protected HTML page of recent asks, live connections and catalog
// state. Everything is rendered on the server; the page loads no scripts
// or external assets.
package admin

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/internal/metrics"
	"github.com/nlproxy/nlproxy/proxy"
	"github.com/nlproxy/nlproxy/workload"
)

// Check is one readiness condition.
type Check struct {
	Name  string // upstream, catalog, ollama
	Check func(ctx context.Context) error
	// Notes, when set, are said under a passing check: what works, but not
	// as the operator may expect (a model whose system prompt is folded).
	Notes func() []string
}

// Server is the admin HTTP handler. Set the fields before Handler.
type Server struct {
	Metrics *metrics.Metrics // nil: no /metrics
	Checks  []Check          // /readyz runs them all; none: always ready
	// CheckTimeout bounds each readiness check (default 2s).
	CheckTimeout time.Duration
	// Token protects the page; "" turns the page off (metrics and health
	// stay, as Prometheus and load balancers do not log in).
	Token    string
	Sessions func() []proxy.SessionInfo // nil: no connection list
	Catalogs func() []catalog.Status    // nil: no catalog section
	Asks     *Recent                    // nil: no recent asks
	// Workload is what --learn-workload captured and learnt; nil: no section.
	Workload *workload.Collector
	// Verified lists the verified queries with their use counts; nil: no
	// section.
	Verified func() []VerifiedQuery
	Version  string
	Started  time.Time
}

// cookieName holds the token once given in ?token=, so the page's links
// work without it in every URL.
const cookieName = "nlproxy_admin"

// Handler routes the admin endpoints.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	if s.Metrics != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.Metrics.Registry, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	// Browsers ask for it; a 404 would be a console error on the page.
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /{$}", s.page)
	return mux
}

// readyz answers 200 when every check passes, else 503 naming what is missing.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	timeout := s.CheckTimeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	errs := make([]error, len(s.Checks))
	var wg sync.WaitGroup
	for i, c := range s.Checks {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(r.Context(), timeout)
			defer cancel()
			errs[i] = c.Check(ctx)
		})
	}
	wg.Wait()
	var b strings.Builder
	ready := true
	for i, c := range s.Checks {
		if errs[i] != nil {
			ready = false
			fmt.Fprintf(&b, "%s: %v\n", c.Name, errs[i])
		} else {
			fmt.Fprintf(&b, "%s: ok\n", c.Name)
			if c.Notes != nil {
				for _, n := range c.Notes() {
					fmt.Fprintf(&b, "%s: note: %s\n", c.Name, n)
				}
			}
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if !ready {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, "not ready\n"+b.String())
		return
	}
	fmt.Fprint(w, "ready\n"+b.String())
}

// authorized accepts the token as a bearer token, the admin cookie or a
// ?token= parameter (which then sets the cookie).
func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	ok := func(got string) bool {
		return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(s.Token)) == 1
	}
	if h, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); found && ok(h) {
		return true
	}
	if c, err := r.Cookie(cookieName); err == nil && ok(c.Value) {
		return true
	}
	if t := r.URL.Query().Get("token"); ok(t) {
		http.SetCookie(w, &http.Cookie{Name: cookieName, Value: t, Path: "/", HttpOnly: true,
			SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
		return true
	}
	return false
}

func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	if s.Token == "" {
		http.Error(w, "the admin page is off: start nlproxy with --admin-token-file", http.StatusNotFound)
		return
	}
	if !s.authorized(w, r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="nlproxy admin"`)
		http.Error(w, "admin token required (Authorization: Bearer TOKEN, or ?token=TOKEN once)", http.StatusUnauthorized)
		return
	}
	data := pageData{Version: s.Version, Now: time.Now(), Started: s.Started}
	if s.Asks != nil {
		data.Asks = s.Asks.List()
	}
	if s.Sessions != nil {
		data.Sessions = s.Sessions()
		data.ShowSessions = true
	}
	if s.Catalogs != nil {
		data.Catalogs = s.Catalogs()
		data.ShowCatalogs = true
	}
	if s.Workload != nil {
		data.Workload = workloadSection(s.Workload)
	}
	if s.Verified != nil {
		data.Verified = s.Verified()
		data.ShowVerified = true
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	// Nothing on the page comes from elsewhere: a strict policy costs nothing.
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	w.Header().Set("X-Frame-Options", "DENY")
	if err := pageTemplate.Execute(w, data); err != nil {
		// Headers are gone; the half page shows the failure to the operator.
		fmt.Fprintf(w, "<p>render error: %s</p>", templateEscape(err.Error()))
	}
}

// ErrNotLoaded is a readiness failure: the catalog has no snapshot yet.
var ErrNotLoaded = errors.New("no snapshot loaded yet")

// Recent keeps the last N asks, newest first. Safe for concurrent use.
type Recent struct {
	mu   sync.Mutex
	ring []*proxy.AskRecord
	next int
	full bool
}

// NewRecent keeps up to n asks (n <= 0: 100).
func NewRecent(n int) *Recent {
	if n <= 0 {
		n = 100
	}
	return &Recent{ring: make([]*proxy.AskRecord, n)}
}

// Add records an ask.
func (r *Recent) Add(rec *proxy.AskRecord) {
	r.mu.Lock()
	r.ring[r.next] = rec
	r.next = (r.next + 1) % len(r.ring)
	if r.next == 0 {
		r.full = true
	}
	r.mu.Unlock()
}

// List returns the asks kept, newest first.
func (r *Recent) List() []*proxy.AskRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.next
	if r.full {
		n = len(r.ring)
	}
	out := make([]*proxy.AskRecord, 0, n)
	for i := 1; i <= n; i++ {
		out = append(out, r.ring[(r.next-i+len(r.ring))%len(r.ring)])
	}
	return out
}
