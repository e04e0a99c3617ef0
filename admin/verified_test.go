package admin

import (
	"strings"
	"testing"
)

// TestVerifiedSection: the page lists the verified queries with their use
// counts, escaped; without the list there is no section.
func TestVerifiedSection(t *testing.T) {
	s := &Server{Token: "tok", Verified: func() []VerifiedQuery {
		return []VerifiedQuery{{Database: "shop", Name: "orders_in_city", Question: "orders in {city} <b>", Roles: []string{"analyst", "ops"}, Uses: 42}}
	}}
	b := body(t, get(t, s.Handler(), "/", "Authorization", "Bearer tok"))
	for _, want := range []string{`id="verified"`, "orders_in_city", "analyst, ops", "<td>42</td>", "&lt;b&gt;"} {
		if !strings.Contains(b, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if off := body(t, get(t, (&Server{Token: "tok"}).Handler(), "/", "Authorization", "Bearer tok")); strings.Contains(off, `id="verified"`) {
		t.Error("verified section shown without verified queries")
	}
}
