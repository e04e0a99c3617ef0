package llm_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/internal/metrics"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
)

const poolModel = "qwen2.5-coder:7b"

// gatedServer is a fake Ollama whose answers wait for the test: arrived
// gets the server's name when a chat reaches it.
type gatedServer struct {
	fake *fakeollama.Server
	name string
}

func newGated(t *testing.T, name string, arrived chan<- string, release <-chan struct{}) *gatedServer {
	t.Helper()
	f := fakeollama.New(t, fakeollama.Options{Models: []string{poolModel}})
	f.SetDefault(&fakeollama.Rule{Name: "gated", ReplyFunc: func(v fakeollama.ChatView) string {
		arrived <- name
		<-release
		return "ok from " + name
	}})
	return &gatedServer{fake: f, name: name}
}

func newPool(t *testing.T, m *metrics.Metrics, hosts ...string) *llm.Pool {
	t.Helper()
	p, err := llm.NewPool(llm.Config{
		Models:       map[llm.Role]string{llm.RoleGenerator: poolModel},
		CallTimeout:  time.Minute,
		RetryBackoff: time.Millisecond,
	}, hosts, m)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func chat(p *llm.Pool, prompt string) (llm.ChatResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return p.Chat(ctx, llm.ChatRequest{Messages: []llm.Message{{Role: llm.SpeakerUser, Content: prompt}}, MaxTokens: 10})
}

// TestPoolLeastOutstandingWork: a call goes where the least estimated work
// is in flight, so one long prompt on a server sends the next short ones to
// the other.
func TestPoolLeastOutstandingWork(t *testing.T) {
	arrived := make(chan string, 8)
	release := make(chan struct{})
	a := newGated(t, "a", arrived, release)
	b := newGated(t, "b", arrived, release)
	p := newPool(t, nil, a.fake.URL(), b.fake.URL())

	var wg sync.WaitGroup
	call := func(prompt string) {
		wg.Go(func() {
			if _, err := chat(p, prompt); err != nil {
				t.Error(err)
			}
		})
	}
	call(strings.Repeat("long prompt ", 4000)) // ~12k tokens of work
	first := <-arrived
	call("short one")
	call("short two")
	second, third := <-arrived, <-arrived
	if second == first || third == first {
		t.Errorf("short calls went to %s and %s while %s held the long one", second, third, first)
	}
	st := p.Servers()
	calls := map[string]int{}
	for _, s := range st {
		calls[s.URL] = s.Outstanding
	}
	close(release)
	wg.Wait()
	if len(calls) != 2 {
		t.Fatalf("servers: %+v", st)
	}
	for _, s := range p.Servers() {
		if s.Outstanding != 0 || s.Work != 0 {
			t.Errorf("after the calls %s still books %d calls, %d work", s.URL, s.Outstanding, s.Work)
		}
	}
}

// TestPoolUnhealthySkippedAndRetried: a failing server's call moves to the
// other server; the failing one is skipped until its backoff ends, then
// tried again; metrics say which server is up.
func TestPoolUnhealthySkippedAndRetried(t *testing.T) {
	bad := fakeollama.New(t, fakeollama.Options{Models: []string{poolModel}})
	bad.SetRules(fakeollama.Rule{Name: "overloaded", Status: 503, Error: "server busy", Times: 1})
	bad.SetDefault(&fakeollama.Rule{Name: "fine", Reply: "from bad"})
	good := fakeollama.New(t, fakeollama.Options{Models: []string{poolModel}})
	good.SetDefault(&fakeollama.Rule{Name: "fine", Reply: "from good"})
	m := metrics.New()
	p := newPool(t, m, bad.URL(), good.URL())
	now := time.Now()
	var clockMu sync.Mutex
	llm.SetPoolClock(p, func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now })
	advance := func(d time.Duration) { clockMu.Lock(); now = now.Add(d); clockMu.Unlock() }

	// Both idle: the first call goes to the first server, fails with 503
	// and is answered by the other.
	resp, err := chat(p, "q1")
	if err != nil || resp.Content != "from good" {
		t.Fatalf("q1: %q, %v", resp.Content, err)
	}
	if n := len(bad.RequestsTo(fakeollama.RouteChat)); n != 1 {
		t.Fatalf("bad server saw %d chats, want 1", n)
	}
	up := func(server string) string {
		re := regexp.MustCompile(`(?m)^nlproxy_llm_server_up\{server="` + regexp.QuoteMeta(server) + `"\} (\d)$`)
		if m := re.FindStringSubmatch(metricsText(t, m)); m != nil {
			return m[1]
		}
		return "absent"
	}
	if up(bad.URL()) != "0" || up(good.URL()) != "1" {
		t.Errorf("server_up: bad %v, good %v", up(bad.URL()), up(good.URL()))
	}
	// Skipped while down: every call goes to the good one.
	for i := range 3 {
		if resp, err := chat(p, "skip"); err != nil || resp.Content != "from good" {
			t.Fatalf("call %d while down: %q, %v", i, resp.Content, err)
		}
	}
	if n := len(bad.RequestsTo(fakeollama.RouteChat)); n != 1 {
		t.Errorf("bad server got %d chats while skipped", n)
	}
	// After the backoff the server is tried again and, answering, is up.
	advance(time.Minute)
	seen := false
	for range 4 {
		resp, err := chat(p, "again")
		if err != nil {
			t.Fatal(err)
		}
		seen = seen || resp.Content == "from bad"
	}
	if !seen {
		t.Error("the recovered server was never tried again")
	}
	if up(bad.URL()) != "1" {
		t.Error("recovered server not reported up")
	}
	text := metricsText(t, m)
	for _, re := range []string{
		`nlproxy_llm_calls_total\{model="` + regexp.QuoteMeta(poolModel) + `",result="ok",server="` + regexp.QuoteMeta(good.URL()) + `"\} [1-9]`,
		`nlproxy_llm_calls_total\{model="` + regexp.QuoteMeta(poolModel) + `",result="error",server="` + regexp.QuoteMeta(bad.URL()) + `"\} 1`,
		`nlproxy_llm_tokens_total\{kind="prompt",model="` + regexp.QuoteMeta(poolModel) + `",server="` + regexp.QuoteMeta(bad.URL()) + `"\} [1-9]`,
		`nlproxy_llm_outstanding_calls\{server="` + regexp.QuoteMeta(bad.URL()) + `"\} 0`,
	} {
		if !regexp.MustCompile(`(?m)^` + re).MatchString(text) {
			t.Errorf("metrics lack %s\n%s", re, text)
		}
	}
}

// TestPoolAllDown: with every server unreachable the call fails as
// unreachable (after trying each), and Check says so.
func TestPoolAllDown(t *testing.T) {
	var hosts []string
	for range 2 {
		hs := httptest.NewServer(nil)
		hosts = append(hosts, hs.URL)
		hs.Close() // nothing listens there any more
	}
	p := newPool(t, nil, hosts...)
	_, err := chat(p, "anyone?")
	if !errors.Is(err, llm.ErrUnreachable) {
		t.Errorf("all down: %v, want ErrUnreachable", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.Check(ctx); err == nil || !strings.Contains(err.Error(), hosts[0]) || !strings.Contains(err.Error(), hosts[1]) {
		t.Errorf("Check = %v, want both servers named", err)
	}
	for _, s := range p.Servers() {
		if s.Up {
			t.Errorf("%s reported up", s.URL)
		}
	}
}

// TestPoolRequestErrorNotFailedOver: a 400 is the request's fault; it is
// not sent to another server and marks nobody down.
func TestPoolRequestErrorNotFailedOver(t *testing.T) {
	a := fakeollama.New(t, fakeollama.Options{Models: []string{poolModel}})
	b := fakeollama.New(t, fakeollama.Options{Models: []string{poolModel}})
	for _, f := range []*fakeollama.Server{a, b} {
		f.SetDefault(&fakeollama.Rule{Name: "bad request", Status: 400, Error: "invalid options"})
	}
	p := newPool(t, nil, a.URL(), b.URL())
	if _, err := chat(p, "q"); err == nil {
		t.Fatal("a 400 succeeded")
	}
	if n := len(a.RequestsTo(fakeollama.RouteChat)) + len(b.RequestsTo(fakeollama.RouteChat)); n != 1 {
		t.Errorf("%d requests for one bad call, want 1", n)
	}
	for _, s := range p.Servers() {
		if !s.Up {
			t.Errorf("%s marked down by a bad request", s.URL)
		}
	}
}

func TestPoolConfigErrors(t *testing.T) {
	if _, err := llm.NewPool(llm.Config{}, []string{"http://127.0.0.1:1", "127.0.0.1:1"}, nil); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate host: %v", err)
	}
}

func metricsText(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}
