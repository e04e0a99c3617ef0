// Package gobfile is the versioned on-disk framing the catalog's indexes
// share: an 8-byte magic, a big-endian uint32 format version, then one gob
// value.
package gobfile

import (
	"bufio"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
)

// ErrFormat is wrapped by Read for data of another kind or version, or corrupt.
var ErrFormat = errors.New("invalid data")

// Write writes the header and v; it returns the bytes written.
func Write(w io.Writer, magic string, version uint32, v any) (int64, error) {
	if len(magic) != 8 {
		return 0, fmt.Errorf("gobfile: magic %q is not 8 bytes", magic)
	}
	cw := &countWriter{w: w}
	bw := bufio.NewWriter(cw)
	var hdr [12]byte
	copy(hdr[:8], magic)
	binary.BigEndian.PutUint32(hdr[8:], version)
	bw.Write(hdr[:]) //nolint:errcheck // a bufio error is reported again by Flush
	if err := gob.NewEncoder(bw).Encode(v); err != nil {
		return cw.n, fmt.Errorf("encode: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return cw.n, fmt.Errorf("write: %w", err)
	}
	return cw.n, nil
}

// Read checks the header and decodes the value into v (a pointer).
func Read(r io.Reader, magic string, version uint32, v any) error {
	br := bufio.NewReader(r)
	var hdr [12]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return fmt.Errorf("%w: header: %w", ErrFormat, err)
	}
	if string(hdr[:8]) != magic {
		return fmt.Errorf("%w: bad magic", ErrFormat)
	}
	if got := binary.BigEndian.Uint32(hdr[8:]); got != version {
		return fmt.Errorf("%w: version %d, want %d", ErrFormat, got, version)
	}
	if err := gob.NewDecoder(br).Decode(v); err != nil {
		return fmt.Errorf("%w: %w", ErrFormat, err)
	}
	return nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
