// Package embedding defines the interface the catalog indexes use to obtain
// text embeddings, plus vector helpers. Implementations live with the LLM
// client (an Ollama /api/embed call, for instance); the catalog only depends
// on this interface so it works lexically when no embedder is configured.
package embedding

import (
	"context"
	"math"
)

// Embedder turns texts into vectors. Implementations must return exactly one
// vector per input text, in order, all of the same dimension.
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}

// Cosine is the cosine similarity of a and b in [-1, 1]. It returns 0 when
// the lengths differ or either vector is zero, so a bad vector never ranks.
func Cosine(a, b []float32) float32 {
	if len(a) != len(b) || len(a) == 0 {
		return 0
	}
	var dot, na, nb float64
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		dot += x * y
		na += x * x
		nb += y * y
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return float32(dot / (math.Sqrt(na) * math.Sqrt(nb)))
}
