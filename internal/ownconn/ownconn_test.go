package ownconn

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestParams(t *testing.T) {
	cases := []struct {
		mode     Mode
		b        Bounds
		readOnly bool
		stmt     string
	}{
		{Read, Bounds{}, true, "30000"},
		{Write, Bounds{Statement: time.Minute}, false, "60000"},
		{Read, Bounds{Statement: time.Microsecond}, true, "1"}, // never 0: that would mean no bound
	}
	for _, c := range cases {
		p := Params(c.mode, c.b)
		if p["search_path"] != "pg_catalog, pg_temp" || p["statement_timeout"] != c.stmt || p["lock_timeout"] != "5000" {
			t.Errorf("%+v: %v", c, p)
		}
		if (p["default_transaction_read_only"] == "on") != c.readOnly {
			t.Errorf("%+v: read-only %q", c, p["default_transaction_read_only"])
		}
	}
	var cfg pgconn.Config
	Configure(&cfg, Read, Bounds{})
	if cfg.RuntimeParams["search_path"] != SearchPath {
		t.Errorf("Configure: %v", cfg.RuntimeParams)
	}
}

func TestPinLocal(t *testing.T) {
	s := PinLocal(Bounds{Statement: 2 * time.Second, Lock: time.Second})
	for _, want := range []string{"pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true)",
		"pg_catalog.set_config('statement_timeout', '2000', true)", "pg_catalog.set_config('lock_timeout', '1000', true)"} {
		if !strings.Contains(s, want) {
			t.Errorf("PinLocal = %s, want %s in it", s, want)
		}
	}
	// Fixed ASCII: it lexes the same under any session setting.
	for _, r := range s {
		if r > 0x7e {
			t.Fatalf("non-ASCII in %q", s)
		}
	}
}
