package proxy

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/testkit/pgtest"
	"go.uber.org/zap"
)

func FuzzStartup(f *testing.F) {
	f.Add(encodeStartup(196608, []param{{"user", "u"}, {"database", "d"}})[4:])
	f.Add(encodeCancel(1, []byte{1, 2, 3, 4})[4:])
	f.Add(binary.BigEndian.AppendUint32(nil, codeSSL))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := parseStartup(b)
		if err != nil {
			return
		}
		switch p.Kind {
		case startupMessage:
			// Re-encoding a parsed startup packet must round-trip.
			again, err := parseStartup(encodeStartup(p.Version, p.Params)[4:])
			if err != nil || !reflect.DeepEqual(again, p) {
				t.Fatalf("round trip: %+v vs %+v (%v)", again, p, err)
			}
		case startupCancel:
			again, err := parseStartup(encodeCancel(p.PID, p.Secret)[4:])
			if err != nil || !reflect.DeepEqual(again, p) {
				t.Fatalf("cancel round trip: %+v vs %+v (%v)", again, p, err)
			}
		}
	})
}

// tap relays one client connection to addr and records what the client
// side sent: the bytes the proxy wrote upstream.
type tap struct {
	ln   net.Listener
	mu   sync.Mutex
	sent bytes.Buffer
	done chan struct{}
}

func startTap(t testing.TB, addr string) *tap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tp := &tap{ln: ln, done: make(chan struct{})}
	go func() {
		defer close(tp.done)
		c, err := ln.Accept()
		ln.Close()
		if err != nil {
			return
		}
		defer c.Close()
		up, err := net.Dial("tcp", addr)
		if err != nil {
			return
		}
		defer up.Close()
		go func() { _, _ = io.Copy(c, up); c.Close() }()
		buf := make([]byte, 32<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				tp.mu.Lock()
				tp.sent.Write(buf[:n])
				tp.mu.Unlock()
				if _, werr := up.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return tp
}

// proxyFrames runs the client byte stream in through a real proxy session
// to the trust cluster and returns what the proxy sent upstream after
// startup. The client half-closes after writing, so the session handles
// everything it was sent before it ends.
func proxyFrames(t *testing.T, in []byte) []byte {
	tp := startTap(t, trustPG.Addr())
	srv := &Server{Upstreams: []Upstream{{Address: tp.ln.Addr().String(), TLS: UpstreamTLSDisable}}, Logger: zap.NewNop(), MaxMessageSize: 1 << 16}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	defer func() { srv.Close(); <-served }()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	startup := encodeStartup(196608, []param{{"user", pgtest.Superuser}, {"database", "postgres"}})
	go func() {
		_, _ = conn.Write(append(startup, in...))
		_ = conn.(*net.TCPConn).CloseWrite()
	}()
	read := make(chan struct{})
	go func() { defer close(read); _, _ = io.Copy(io.Discard, conn) }()
	select {
	case <-read:
	case <-time.After(time.Minute):
		t.Fatalf("session did not end within a minute (a hang, not a speed check); input %q", in)
	}
	srv.Close()
	<-tp.done
	tp.mu.Lock()
	defer tp.mu.Unlock()
	out := tp.sent.Bytes()
	if !bytes.HasPrefix(out, startup) {
		t.Fatalf("upstream did not start with the client's startup packet: %q", out[:min(len(out), 64)])
	}
	out = bytes.TrimSuffix(out[len(startup):], []byte(terminateMsg))
	return append([]byte(nil), out...)
}

// splitFrames frames a byte stream of typed messages; rest is what remains.
func splitFrames(b []byte) (frames [][]byte, rest []byte) {
	for len(b) >= 5 {
		n := int(int32(binary.BigEndian.Uint32(b[1:])))
		if n < 4 || 1+n > len(b) {
			break
		}
		frames = append(frames, b[:1+n])
		b = b[1+n:]
	}
	return frames, b
}

func msg(typ byte, body string) []byte { return appendMsg(nil, typ, []byte(body)) }

func FuzzFrame(f *testing.F) {
	var pipeline []byte
	pipeline = append(pipeline, parseMsg("s1", "SELECT $1::int", []byte{0, 1, 0, 0, 0, 23})...)
	pipeline = append(pipeline, msg('B', "\x00s1\x00\x00\x00\x00\x01\x00\x00\x00\x011\x00\x00")...)
	pipeline = append(pipeline, msg('E', "\x00\x00\x00\x00\x00")...)
	pipeline = append(pipeline, msg('S', "")...)
	f.Add(queryMsg("SELECT 1"))
	f.Add(queryMsg("-- ask: how many users"))
	f.Add(append(queryMsg("/* ask: x */"), queryMsg("ASK y;")...))
	f.Add(pipeline)
	f.Add(append(parseMsg("", "-- ask-sql: q", []byte{0, 0}), msg('S', "")...))
	f.Add([]byte{'Q', 0, 0, 0, 2})
	f.Add(append(msg('d', "copy data"), msg('c', "")...))
	f.Fuzz(func(t *testing.T, in []byte) {
		needPG(t)
		out := proxyFrames(t, in)
		frames, rest := splitFrames(out)
		inFrames, inRest := splitFrames(in)
		// A partial message upstream is only allowed when the client's stream
		// itself ended mid-message (the relay streams bodies through).
		if len(rest) != 0 && !bytes.HasPrefix(inRest, rest) {
			t.Fatalf("upstream stream has %d trailing bytes that are not a whole message", len(rest))
		}
		marker := false
		for _, fr := range frames {
			switch fr[0] {
			case 'Q':
				if ParseMarker(string(bytes.TrimSuffix(fr[5:], []byte{0}))).Kind != MarkerNone {
					t.Fatalf("marker Query forwarded upstream: %q", fr)
				}
			case 'P':
				if _, q, _, err := splitParse(fr[5:]); err == nil && ParseMarker(q).Kind != MarkerNone {
					t.Fatalf("marker Parse forwarded upstream: %q", fr)
				}
			}
		}
		for _, fr := range inFrames {
			if (fr[0] == 'Q' || fr[0] == 'P') && bytes.Contains(fr, []byte(sentinelSQL)) {
				return // input already contains the sentinel; ordering check below would be ambiguous
			}
			if fr[0] == 'Q' && ParseMarker(string(bytes.TrimSuffix(fr[5:], []byte{0}))).Kind != MarkerNone {
				marker = true
			}
			if fr[0] == 'P' {
				if _, q, _, err := splitParse(fr[5:]); err == nil && ParseMarker(q).Kind != MarkerNone {
					marker = true
				}
			}
		}
		if !marker && !bytes.HasPrefix(in, out) {
			t.Fatalf("without markers the upstream stream must be a prefix of the input\nin  %q\nout %q", in, out)
		}
	})
}

// A marker while the server waits for COPY data must not wait for the
// server to become idle (it never would): it is passed on as the protocol
// error it is.
func TestMarkerDuringCopyIn(t *testing.T) {
	needPG(t)
	in := append(queryMsg("CREATE TEMP TABLE ft (a int); COPY ft FROM STDIN"), queryMsg("-- ask: how many rows")...)
	out := proxyFrames(t, in)
	frames, _ := splitFrames(out)
	if len(frames) < 2 || frames[0][0] != 'Q' {
		t.Fatalf("upstream frames %q", frames)
	}
}
