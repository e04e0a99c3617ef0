package descindex

import (
	"bufio"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
)

const (
	fileMagic   = "NLPXDIDX"
	fileVersion = 1
)

// ErrFormat is returned by Read for data that is not a description index of
// a supported version.
var ErrFormat = errors.New("descindex: unsupported or corrupt index data")

type snapshot struct {
	Docs        []Doc
	Vecs        [][]float32 // nil when never embedded
	EmbedWeight float64
	K1, B       float64
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

// WriteTo writes magic, version, then a gob of the docs and any computed
// vectors (so a reload does not re-embed).
func (ix *Index) WriteTo(w io.Writer) (int64, error) {
	ix.mu.Lock()
	snap := snapshot{Docs: ix.docs, Vecs: ix.vecs, EmbedWeight: ix.opts.EmbedWeight, K1: ix.opts.K1, B: ix.opts.B}
	ix.mu.Unlock()
	cw := &countWriter{w: w}
	bw := bufio.NewWriter(cw)
	bw.WriteString(fileMagic)
	var v [4]byte
	binary.BigEndian.PutUint32(v[:], fileVersion)
	bw.Write(v[:])
	if err := gob.NewEncoder(bw).Encode(&snap); err != nil {
		return cw.n, fmt.Errorf("descindex: encode: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return cw.n, fmt.Errorf("descindex: write: %w", err)
	}
	return cw.n, nil
}

// Read loads an index written by WriteTo. opts supplies the Embedder (not
// persisted); a zero EmbedWeight/K1/B takes the persisted values.
func Read(r io.Reader, opts Options) (*Index, error) {
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
	if snap.Vecs != nil && len(snap.Vecs) != len(snap.Docs) {
		return nil, fmt.Errorf("%w: %d vectors for %d docs", ErrFormat, len(snap.Vecs), len(snap.Docs))
	}
	if opts.EmbedWeight == 0 {
		opts.EmbedWeight = snap.EmbedWeight
	}
	if opts.K1 == 0 {
		opts.K1 = snap.K1
	}
	if opts.B == 0 {
		opts.B = snap.B
	}
	ix := New(snap.Docs, opts)
	ix.vecs = snap.Vecs
	return ix, nil
}
