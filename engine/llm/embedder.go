package llm

import "context"

// Embedder embeds texts with one model. Its method set matches the
// catalog's embedder interface without importing it.
type Embedder struct {
	client Client
	model  string
}

// NewEmbedder binds a client to an embedding model ("" = the client's
// configured embedding model).
func NewEmbedder(client Client, model string) *Embedder {
	return &Embedder{client: client, model: model}
}

// Embedder returns an Embedder for model ("" = Config.Models[RoleEmbedding]).
func (c *OllamaClient) Embedder(model string) *Embedder {
	if model == "" {
		model = c.cfg.Models[RoleEmbedding]
	}
	return NewEmbedder(c, model)
}

// Embed returns one vector per text.
func (e *Embedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	return e.client.Embed(ctx, e.model, texts)
}

// Model is the embedding model's name (part of an index's identity: vectors
// from different models must not be mixed).
func (e *Embedder) Model() string { return e.model }
