package proxy

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

func body(code uint32, rest ...byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, code)
	return append(b, rest...)
}

func TestParseStartup(t *testing.T) {
	startup := encodeStartup(196608, []param{{"user", "alice"}, {"database", "db"}, {"application_name", "x"}})
	cancel := encodeCancel(42, []byte{1, 2, 3, 4})
	longCancel := encodeCancel(7, make([]byte, 32))
	tests := []struct {
		name    string
		in      []byte
		want    startupPacket
		wantErr bool
	}{
		{"startup", startup[4:], startupPacket{Kind: startupMessage, Version: 196608,
			Params: []param{{"user", "alice"}, {"database", "db"}, {"application_name", "x"}}}, false},
		{"protocol 3.2", encodeStartup(196610, []param{{"user", "u"}})[4:],
			startupPacket{Kind: startupMessage, Version: 196610, Params: []param{{"user", "u"}}}, false},
		{"ssl", body(codeSSL), startupPacket{Kind: startupSSL}, false},
		{"gssenc", body(codeGSSENC), startupPacket{Kind: startupGSSENC}, false},
		{"cancel", cancel[4:], startupPacket{Kind: startupCancel, PID: 42, Secret: []byte{1, 2, 3, 4}}, false},
		{"cancel 3.2", longCancel[4:], startupPacket{Kind: startupCancel, PID: 7, Secret: make([]byte, 32)}, false},
		{"short", []byte{0, 3}, startupPacket{}, true},
		{"ssl with junk", body(codeSSL, 1), startupPacket{}, true},
		{"cancel short", body(codeCancel, 0, 0, 0, 1), startupPacket{}, true},
		{"protocol 2", body(2 << 16), startupPacket{}, true},
		{"unknown code", body(12345678), startupPacket{}, true},
		{"no terminator", body(196608, 'u', 's', 'e', 'r', 0, 'a', 0), startupPacket{}, true},
		{"missing value", body(196608, 'u', 's', 'e', 'r', 0), startupPacket{}, true},
		{"no user", encodeStartup(196608, []param{{"database", "d"}})[4:], startupPacket{}, true},
		{"trailing", append(startup[4:], 'x'), startupPacket{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStartup(tt.in)
			if tt.wantErr {
				if !errors.Is(err, ErrProtocol) {
					t.Fatalf("err = %v, want ErrProtocol", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestStripChannelBinding(t *testing.T) {
	in := []byte{0, 0, 0, 10}
	in = append(in, "SCRAM-SHA-256-PLUS\x00SCRAM-SHA-256\x00\x00"...)
	want := append([]byte{0, 0, 0, 10}, "SCRAM-SHA-256\x00\x00"...)
	if got := stripChannelBinding(in); string(got) != string(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestParseUpstream(t *testing.T) {
	tests := []struct {
		route, dsn string
		want       Upstream
		wantErr    bool
	}{
		{"", "postgres://u:p@db.example:6432/app?sslmode=require", Upstream{Address: "db.example:6432", OverrideDatabase: "app", TLS: UpstreamTLSRequire}, false},
		{"sales", "host=10.0.0.1 port=5433 dbname='sales db' sslmode=disable", Upstream{Database: "sales", Address: "10.0.0.1:5433", OverrideDatabase: "sales db", TLS: UpstreamTLSDisable}, false},
		{"", "host=localhost", Upstream{Address: "localhost:5432", TLS: UpstreamTLSPrefer}, false},
		{"", "postgresql:///x?host=/var/run/postgresql", Upstream{Address: "/var/run/postgresql/.s.PGSQL.5432", OverrideDatabase: "x", TLS: UpstreamTLSPrefer}, false},
		{"", "host=h sslmode=bogus", Upstream{}, true},
		{"", "host=h port=notaport", Upstream{}, true},
		{"", "host=h dbname='unterminated", Upstream{}, true},
		{"", " host = h  dbname='it\\'s' ", Upstream{Address: "h:5432", OverrideDatabase: "it's", TLS: UpstreamTLSPrefer}, false},
		{"", `host=h dbname=a\ b`, Upstream{Address: "h:5432", OverrideDatabase: "a b", TLS: UpstreamTLSPrefer}, false},
		{"", "host=h sslmode=allow", Upstream{Address: "h:5432", TLS: UpstreamTLSPrefer}, false},
		{"", "host=h sslmode=disable sslrootcert=/nonexistent", Upstream{Address: "h:5432", TLS: UpstreamTLSDisable}, false},
		{"", "host=h sslmode=require sslrootcert=/nonexistent", Upstream{}, true},
		{"", "host=a,b", Upstream{}, true},
		{"", "host=h dbname", Upstream{}, true},
	}
	for _, tt := range tests {
		got, err := ParseUpstream(tt.route, tt.dsn)
		if tt.wantErr {
			if err == nil {
				t.Errorf("ParseUpstream(%q) succeeded, want error", tt.dsn)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseUpstream(%q): %v", tt.dsn, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseUpstream(%q) = %+v, want %+v", tt.dsn, got, tt.want)
		}
	}
}
