package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"reflect"
	"sync"
	"testing"

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

// frameSession is a session whose client side reads from in and whose
// upstream writes go to a buffer: the real clientLoop, without sockets.
func frameSession(in []byte, maxMsg int) (*session, *bytes.Buffer, *bytes.Buffer) {
	up, cl := &bytes.Buffer{}, &bytes.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	s := &session{
		srv:    &Server{},
		log:    zap.NewNop(),
		maxMsg: maxMsg,
		cr:     bufio.NewReaderSize(bytes.NewReader(in), 4096),
		cw:     bufio.NewWriter(cl),
		uw:     newOutBuf(up, 4096),
		ctx:    ctx, cancel: cancel,
		txStatus: 'I',
	}
	s.cond = sync.NewCond(&s.mu)
	return s, up, cl
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
		s, up, _ := frameSession(in, 1<<16)
		_ = s.clientLoop()
		_ = s.uw.Flush()
		out := up.Bytes()
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
