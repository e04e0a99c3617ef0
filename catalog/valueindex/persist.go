package valueindex

import (
	"errors"
	"fmt"
	"io"

	"github.com/nlproxy/nlproxy/catalog/internal/gobfile"
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
	Aliases []Alias
}

// WriteTo writes the index: an 8-byte magic, a uint32 version, then a gob
// snapshot of the values.
func (ix *Index) WriteTo(w io.Writer) (int64, error) {
	snap := snapshot{Cfg: ix.cfg, Cols: ix.cols, Skipped: ix.skipped, Raw: ix.raw, RawOff: ix.rawOff, Aliases: ix.aliases}
	n, err := gobfile.Write(w, fileMagic, fileVersion, &snap)
	if err != nil {
		return n, fmt.Errorf("valueindex: %w", err)
	}
	return n, nil
}

// Read loads an index written by WriteTo and rebuilds its derived structures.
func Read(r io.Reader) (*Index, error) {
	var snap snapshot
	if err := gobfile.Read(r, fileMagic, fileVersion, &snap); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if err := snap.validate(); err != nil {
		return nil, err
	}
	b := &builder{cfg: snap.Cfg, cols: snap.Cols, skipped: snap.Skipped, raw: snap.Raw, rawOff: snap.RawOff, aliases: snap.Aliases}
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
