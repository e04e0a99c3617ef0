package catalog

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/catalog/valueindex"
)

// Snapshot is everything the engine needs about one database, immutable
// once published.
type Snapshot struct {
	Database     string
	Schema       *Schema
	Values       *valueindex.Index // nil when not built
	Descriptions *descindex.Index  // nil when not built
	// Functions is what the SQL guard checks calls and views against.
	Functions *Functions
	BuiltAt   time.Time
	Version   int // build sequence number, +1 per rebuild of this database
}

// FormatVersion is the on-disk format; files of another version are rebuilt.
// 3: the value index carries code↔name aliases (older files would never get
// them until the schema changed).
const FormatVersion = 3

const fileMagic = "NLPXCAT\n"

// Errors from ReadSnapshot; the Manager rebuilds on either.
var (
	ErrCorrupt = errors.New("catalog: snapshot file corrupt")
	ErrVersion = errors.New("catalog: snapshot file format version mismatch")
)

type snapshotMeta struct {
	Database string    `json:"database"`
	BuiltAt  time.Time `json:"built_at"`
	Version  int       `json:"version"`
	Schema   *Schema   `json:"schema"`
	// Functions is nil in snapshots written before the guard needed it.
	Functions *Functions `json:"functions,omitempty"`
}

// SnapshotPath is the file holding database's snapshot under dir.
func SnapshotPath(dir, database string) string {
	return filepath.Join(dir, url.PathEscape(database)+".nlcat")
}

// WriteSnapshot encodes s: magic, format version, fingerprint, then
// length-prefixed sections (metadata+schema JSON, value index, description
// index) and a CRC-32C of everything before it.
func WriteSnapshot(w io.Writer, s *Snapshot) error {
	if s.Schema == nil {
		return errors.New("catalog: snapshot without schema")
	}
	var buf bytes.Buffer
	buf.WriteString(fileMagic)
	buf.Write(binary.BigEndian.AppendUint32(nil, FormatVersion))
	buf.Write(binary.BigEndian.AppendUint16(nil, uint16(len(s.Schema.Fingerprint))))
	buf.WriteString(s.Schema.Fingerprint)
	meta, err := json.Marshal(snapshotMeta{Database: s.Database, BuiltAt: s.BuiltAt, Version: s.Version, Schema: s.Schema, Functions: s.Functions})
	if err != nil {
		return fmt.Errorf("catalog: encode schema: %w", err)
	}
	section := func(fill func(io.Writer) error) error {
		lenAt := buf.Len()
		buf.Write(make([]byte, 8))
		if err := fill(&buf); err != nil {
			return err
		}
		binary.BigEndian.PutUint64(buf.Bytes()[lenAt:], uint64(buf.Len()-lenAt-8))
		return nil
	}
	_ = section(func(w io.Writer) error { _, err := w.Write(meta); return err })
	if err := section(func(w io.Writer) error {
		if s.Values == nil {
			return nil
		}
		_, err := s.Values.WriteTo(w)
		return err
	}); err != nil {
		return fmt.Errorf("catalog: encode value index: %w", err)
	}
	if err := section(func(w io.Writer) error {
		if s.Descriptions == nil {
			return nil
		}
		_, err := s.Descriptions.WriteTo(w)
		return err
	}); err != nil {
		return fmt.Errorf("catalog: encode description index: %w", err)
	}
	buf.Write(binary.BigEndian.AppendUint32(nil, crc32.Checksum(buf.Bytes(), crc32.MakeTable(crc32.Castagnoli))))
	if _, err := w.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("catalog: write snapshot: %w", err)
	}
	return nil
}

// ReadSnapshot decodes a snapshot written by WriteSnapshot. descOpts
// supplies the description index's Embedder (not persisted).
func ReadSnapshot(r io.Reader, descOpts descindex.Options) (*Snapshot, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("catalog: read snapshot: %w", err)
	}
	if len(data) < len(fileMagic)+4+2+4 || string(data[:len(fileMagic)]) != fileMagic {
		return nil, fmt.Errorf("%w: bad header", ErrCorrupt)
	}
	p := data[len(fileMagic):]
	if v := binary.BigEndian.Uint32(p); v != FormatVersion {
		return nil, fmt.Errorf("%w: file has %d, want %d", ErrVersion, v, FormatVersion)
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	p = body[len(fileMagic)+4:]
	fpLen := int(binary.BigEndian.Uint16(p))
	if len(p) < 2+fpLen {
		return nil, fmt.Errorf("%w: short fingerprint", ErrCorrupt)
	}
	fp := string(p[2 : 2+fpLen])
	p = p[2+fpLen:]
	next := func() ([]byte, error) {
		if len(p) < 8 {
			return nil, fmt.Errorf("%w: short section", ErrCorrupt)
		}
		n := binary.BigEndian.Uint64(p)
		if n > uint64(len(p)-8) {
			return nil, fmt.Errorf("%w: section length", ErrCorrupt)
		}
		sec := p[8 : 8+n]
		p = p[8+n:]
		return sec, nil
	}
	metaB, err := next()
	if err != nil {
		return nil, err
	}
	var meta snapshotMeta
	if err := json.Unmarshal(metaB, &meta); err != nil || meta.Schema == nil {
		return nil, fmt.Errorf("%w: schema: %v", ErrCorrupt, err)
	}
	if meta.Schema.Fingerprint != fp {
		return nil, fmt.Errorf("%w: header fingerprint does not match schema", ErrCorrupt)
	}
	s := &Snapshot{Database: meta.Database, Schema: meta.Schema, Functions: meta.Functions, BuiltAt: meta.BuiltAt, Version: meta.Version}
	valB, err := next()
	if err != nil {
		return nil, err
	}
	if len(valB) > 0 {
		if s.Values, err = valueindex.Read(bytes.NewReader(valB)); err != nil {
			return nil, fmt.Errorf("%w: value index: %w", ErrCorrupt, err)
		}
	}
	descB, err := next()
	if err != nil {
		return nil, err
	}
	if len(descB) > 0 {
		if s.Descriptions, err = descindex.Read(bytes.NewReader(descB), descOpts); err != nil {
			return nil, fmt.Errorf("%w: description index: %w", ErrCorrupt, err)
		}
	}
	return s, nil
}

// SaveSnapshot writes s atomically to SnapshotPath(dir, s.Database): a temp
// file in the same directory, fsync, rename, fsync of the directory. A crash
// leaves either the old file or the new one, never a torn one.
func SaveSnapshot(dir string, s *Snapshot) (err error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("catalog: data dir: %w", err)
	}
	final := SnapshotPath(dir, s.Database)
	f, err := os.CreateTemp(dir, filepath.Base(final)+".tmp-*")
	if err != nil {
		return fmt.Errorf("catalog: temp file: %w", err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if err := WriteSnapshot(f, s); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("catalog: fsync: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("catalog: close: %w", err)
	}
	if err := os.Rename(f.Name(), final); err != nil {
		return fmt.Errorf("catalog: rename: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // best effort: persists the rename on filesystems that need it
		_ = d.Close()
	}
	return nil
}

// LoadSnapshot reads database's snapshot from dir; a missing file returns an
// error matching fs.ErrNotExist.
func LoadSnapshot(dir, database string, descOpts descindex.Options) (*Snapshot, error) {
	f, err := os.Open(SnapshotPath(dir, database))
	if err != nil {
		return nil, fmt.Errorf("catalog: open snapshot: %w", err)
	}
	defer f.Close()
	return ReadSnapshot(f, descOpts)
}
