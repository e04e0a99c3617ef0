package gobfile

import (
	"bytes"
	"errors"
	"testing"
)

func TestRoundTripAndRejects(t *testing.T) {
	type payload struct{ A []string }
	var buf bytes.Buffer
	n, err := Write(&buf, "TESTMAGC", 3, payload{A: []string{"x", "y"}})
	if err != nil || n != int64(buf.Len()) {
		t.Fatalf("Write = %d, %v (buffer %d)", n, err, buf.Len())
	}
	var got payload
	if err := Read(bytes.NewReader(buf.Bytes()), "TESTMAGC", 3, &got); err != nil || len(got.A) != 2 || got.A[1] != "y" {
		t.Fatalf("Read = %+v, %v", got, err)
	}
	good := buf.Bytes()
	tests := []struct {
		name    string
		data    []byte
		magic   string
		version uint32
	}{
		{"other magic", good, "OTHERMAG", 3},
		{"other version", good, "TESTMAGC", 4},
		{"truncated header", good[:5], "TESTMAGC", 3},
		{"truncated body", good[:len(good)-3], "TESTMAGC", 3},
	}
	for _, tt := range tests {
		if err := Read(bytes.NewReader(tt.data), tt.magic, tt.version, &got); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: err = %v, want ErrFormat", tt.name, err)
		}
	}
}
