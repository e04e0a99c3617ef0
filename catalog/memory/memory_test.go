package memory

import "testing"

func TestLiteralRewriteString(t *testing.T) {
	for _, tt := range []struct {
		rw   LiteralRewrite
		want string
	}{
		{LiteralRewrite{"public.films", "lang", "spanish", "Spanish", RewriteCase}, "public.films.lang: 'spanish' → 'Spanish' (letter case only)"},
		{LiteralRewrite{"s.t", "code", "XYZ", " XYZ", RewriteSpace}, "s.t.code: 'XYZ' → ' XYZ' (whitespace only)"},
		{LiteralRewrite{"s.t", "name", "O'Brian", "O'Brien", RewriteValue}, "s.t.name: 'O''Brian' → 'O''Brien'"},
		{LiteralRewrite{"s.t", "state", "%California%", "%CA%", RewriteCode}, "s.t.state: '%California%' → '%CA%' (the data's code)"},
	} {
		if got := tt.rw.String(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.rw, got, tt.want)
		}
	}
}
