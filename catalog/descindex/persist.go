package descindex

import (
	"errors"
	"fmt"
	"io"

	"github.com/nlproxy/nlproxy/catalog/internal/gobfile"
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

// WriteTo writes magic, version, then a gob of the docs and any computed
// vectors (so a reload does not re-embed).
func (ix *Index) WriteTo(w io.Writer) (int64, error) {
	ix.mu.Lock()
	snap := snapshot{Docs: ix.docs, Vecs: ix.vecs, EmbedWeight: ix.opts.EmbedWeight, K1: ix.opts.K1, B: ix.opts.B}
	ix.mu.Unlock()
	n, err := gobfile.Write(w, fileMagic, fileVersion, &snap)
	if err != nil {
		return n, fmt.Errorf("descindex: %w", err)
	}
	return n, nil
}

// Read loads an index written by WriteTo. opts supplies the Embedder (not
// persisted); a zero EmbedWeight/K1/B takes the persisted values.
func Read(r io.Reader, opts Options) (*Index, error) {
	var snap snapshot
	if err := gobfile.Read(r, fileMagic, fileVersion, &snap); err != nil {
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
