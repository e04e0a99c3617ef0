package redact

import (
	"strings"
	"testing"
)

func TestCredentials(t *testing.T) {
	const key = "sk-live-7f3a9c1e"
	for _, tc := range []struct {
		in      string
		secrets []string
		gone    []string
		kept    []string
	}{
		{in: `{"error":"invalid token, got header Authorization: Bearer ` + key + `"}`, secrets: []string{key}, gone: []string{key}, kept: []string{"invalid token"}},
		{in: `{"error":"unauthorized","authorization":"Bearer abcdefghij"}`, gone: []string{"abcdefghij"}, kept: []string{"unauthorized"}},
		{in: "401: Basic dXNlcjpzM2NyZXQ= rejected", gone: []string{"dXNlcjpzM2NyZXQ="}, kept: []string{"rejected"}},
		{in: `bad request: api_key=hunter2hunter&model=x`, gone: []string{"hunter2hunter"}, kept: []string{"model=x"}},
		{in: `upstream http://bob:pa55word@10.0.0.5:11434/api failed`, gone: []string{"pa55word"}, kept: []string{"bob:", "@10.0.0.5:11434/api failed"}},
		{in: `model "x" not found, try pulling it first`, kept: []string{`model "x" not found, try pulling it first`}},
		{in: "the key " + key + " is unknown", secrets: []string{key}, gone: []string{key}, kept: []string{"is unknown"}},
	} {
		got := Credentials(tc.in, tc.secrets...)
		for _, g := range tc.gone {
			if strings.Contains(got, g) {
				t.Errorf("Credentials(%q) = %q: %q remains", tc.in, got, g)
			}
		}
		for _, k := range tc.kept {
			if !strings.Contains(got, k) {
				t.Errorf("Credentials(%q) = %q: lost %q", tc.in, got, k)
			}
		}
	}
}
