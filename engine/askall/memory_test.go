package askall

import (
	"context"
	"testing"

	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
)

func snap(db string, tables ...catalog.Table) *catalog.Snapshot {
	return &catalog.Snapshot{Database: db, Schema: &catalog.Schema{Tables: tables, Fingerprint: db}}
}

func table(name, comment string, cols ...string) catalog.Table {
	t := catalog.Table{Schema: "public", Name: name, Comment: comment}
	for _, c := range cols {
		t.Columns = append(t.Columns, catalog.Column{Name: c})
	}
	return t
}

func TestMemoryTop(t *testing.T) {
	hospital := snap("hospital", table("hospital", "hospitals and the city they are in", "id", "name", "city_name"),
		table("doctor", "", "id", "hospital_id", "specialty"))
	city := snap("city", table("city", "", "city_name", "population", "state"))
	shop := snap("shop", table("orders", "", "id", "total", "placed_at"))
	shop.Schema.Tables[0].Columns[1].Stats = &catalog.ColumnStats{Examples: []string{"Seattle"}}
	ex := snap("geo", table("place", "", "name", "kind"))
	ex.Schema.Tables[0].Columns[0].Stats = &catalog.ColumnStats{Examples: []string{"Kilimanjaro", "Everest"}}
	m := NewMemory([]*catalog.Snapshot{city, hospital, shop, ex}, nil)
	ctx := context.Background()
	tests := []struct {
		q    string
		k    int
		want []string
	}{
		{"How many hospitals have a cardiology doctor?", 1, []string{"hospital"}},
		{"population of each state", 2, []string{"city", "hospital"}},
		{"How tall is Everest?", 1, []string{"geo"}},
		// No shared term: the configured order fills the candidates.
		{"xyzzy", 2, []string{"city", "hospital"}},
	}
	for _, tt := range tests {
		got := m.Top(ctx, tt.q, tt.k)
		var names []string
		for _, c := range got {
			names = append(names, c.Database)
		}
		if len(names) != len(tt.want) {
			t.Errorf("%q: %v, want %v", tt.q, names, tt.want)
			continue
		}
		for i := range names {
			if names[i] != tt.want[i] {
				t.Errorf("%q: %v, want %v", tt.q, names, tt.want)
				break
			}
		}
	}
	if r := m.Rank(ctx, "hospitals in Seattle", "hospital"); r != 1 {
		t.Errorf("rank of hospital = %d, want 1", r)
	}
	if k1, k2 := memoryKey([]*catalog.Snapshot{city, shop}), memoryKey([]*catalog.Snapshot{shop, city}); k1 != k2 {
		t.Errorf("memory key depends on order: %q %q", k1, k2)
	}
}

// TestMemoryWithEmbeddings: with an embedding model the memory embeds the
// summaries and the question (through Ollama's API) and still ranks by the
// shared words.
func TestMemoryWithEmbeddings(t *testing.T) {
	fake := fakeollama.New(t, fakeollama.Options{Models: []string{"nomic-embed-text"}})
	client, err := llm.New(llm.Config{Host: fake.URL(), Models: map[llm.Role]string{llm.RoleGenerator: "nomic-embed-text", llm.RoleEmbedding: "nomic-embed-text"}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMemory([]*catalog.Snapshot{
		snap("city", table("city", "", "city_name", "population")),
		snap("hospital", table("hospital", "", "id", "name", "beds")),
	}, client.Embedder(""))
	got := m.Top(context.Background(), "how many beds does each hospital have", 1)
	if len(got) != 1 || got[0].Database != "hospital" {
		t.Fatalf("top %v", got)
	}
	if n := len(fake.RequestsTo(fakeollama.RouteEmbed)); n == 0 {
		t.Fatal("no embedding request")
	}
}
