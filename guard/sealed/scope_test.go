package sealed

import (
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/internal/pg"
)

func TestTrialScopeAs(t *testing.T) {
	tests := []struct {
		role, want string
		tx         pg.TxStatus
		wantErr    bool
	}{
		{role: "alice", want: "E'alice'", tx: pg.TxIdle},
		{role: `o'ne\x`, want: `E'o\'ne\\x'`, tx: pg.TxIdle},
		{role: "Zoë", want: `E'Zo\u00EB'`, tx: pg.TxIdle},
		{role: "none", tx: pg.TxIdle, wantErr: true},
		{role: "", tx: pg.TxIdle, wantErr: true},
		{role: "alice", tx: pg.TxInTx, wantErr: true},
		{role: "alice", tx: pg.TxFailed, wantErr: true},
	}
	for _, tt := range tests {
		s, err := TrialScopeAs(Statement{}, tt.tx, time.Second, tt.role)
		if tt.wantErr {
			if err == nil {
				t.Errorf("%q %c: no error", tt.role, byte(tt.tx))
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tt.role, err)
		}
		last := s.Enter[len(s.Enter)-1]
		if want := "SELECT pg_catalog.set_config('role', " + tt.want + ", true)"; last != want || s.Enter[0] != "BEGIN READ ONLY" || s.Exit[0] != "ROLLBACK" {
			t.Errorf("%q: scope %q, want last enter %q", tt.role, s.Enter, want)
		}
		for _, q := range s.Enter {
			for i := 0; i < len(q); i++ {
				if q[i] >= 0x80 {
					t.Errorf("%q: non-ASCII scope text %q", tt.role, q)
				}
			}
		}
	}
}
