package valueindex

import (
	"bufio"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
)

const (
	fileMagic   = "NLPXVIDX"
	fileVersion = 1
)

// ErrFormat is returned by Read for data that is not a value index of a
// supported version.
var ErrFormat = errors.New("valueindex: unsupported or corrupt index data")

// snapshot is what is persisted: the values and the shape parameters. The
// normalized arena, exact map, token, deletion, initials and LSH indexes are
// derived, and rebuilding them on load (seconds for a million values) is
// cheaper than reading ~300 MB of band arrays.
type snapshot struct {
	Cfg     config
	Cols    []colMeta
	Skipped []ColumnStat
	Raw     []byte
	RawOff  []uint32
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

// WriteTo writes the index: an 8-byte magic, a uint32 version, then a gob
// snapshot of the values.
func (ix *Index) WriteTo(w io.Writer) (int64, error) {
	cw := &countWriter{w: w}
	bw := bufio.NewWriter(cw)
	bw.WriteString(fileMagic)
	var v [4]byte
	binary.BigEndian.PutUint32(v[:], fileVersion)
	bw.Write(v[:])
	snap := snapshot{Cfg: ix.cfg, Cols: ix.cols, Skipped: ix.skipped, Raw: ix.raw, RawOff: ix.rawOff}
	if err := gob.NewEncoder(bw).Encode(&snap); err != nil {
		return cw.n, fmt.Errorf("valueindex: encode: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return cw.n, fmt.Errorf("valueindex: write: %w", err)
	}
	return cw.n, nil
}

// Read loads an index written by WriteTo and rebuilds its derived structures.
func Read(r io.Reader) (*Index, error) {
	br := bufio.NewReader(r)
	var hdr [12]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return nil, fmt.Errorf("%w: header: %w", ErrFormat, err)
	}
	if string(hdr[:8]) != fileMagic {
		return nil, fmt.Errorf("%w: bad magic", ErrFormat)
	}
	if v := binary.BigEndian.Uint32(hdr[8:]); v != fileVersion {
		return nil, fmt.Errorf("%w: version %d", ErrFormat, v)
	}
	var snap snapshot
	if err := gob.NewDecoder(br).Decode(&snap); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if err := snap.validate(); err != nil {
		return nil, err
	}
	b := &builder{cfg: snap.Cfg, cols: snap.Cols, skipped: snap.Skipped, raw: snap.Raw, rawOff: snap.RawOff}
	if b.raw == nil {
		b.raw = []byte{}
	}
	return b.finish(), nil
}

func (s *snapshot) validate() error {
	if s.Cfg.Bands <= 0 || s.Cfg.Rows <= 0 || s.Cfg.Bands*s.Cfg.Rows > 1024 || len(s.RawOff) == 0 || s.RawOff[0] != 0 {
		return fmt.Errorf("%w: bad shape", ErrFormat)
	}
	for i := 1; i < len(s.RawOff); i++ {
		if s.RawOff[i] < s.RawOff[i-1] {
			return fmt.Errorf("%w: offsets", ErrFormat)
		}
	}
	if int(s.RawOff[len(s.RawOff)-1]) != len(s.Raw) {
		return fmt.Errorf("%w: arena size", ErrFormat)
	}
	n := int32(len(s.RawOff) - 1)
	prev := int32(0)
	for _, c := range s.Cols {
		if c.Start != prev || c.End < c.Start || c.End > n {
			return fmt.Errorf("%w: column ranges", ErrFormat)
		}
		prev = c.End
	}
	if prev != n {
		return fmt.Errorf("%w: column ranges", ErrFormat)
	}
	return nil
}
