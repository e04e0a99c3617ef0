package llm

import (
	"context"
	"fmt"
	"sort"
	"strings"
)

// CheckModels is the startup check: it lists the server's models and fails
// with ErrModelMissing naming every configured model that is not installed,
// with the `ollama pull` command for each, or with ErrUnreachable (hinting
// at `ollama serve`) when the server is down.
func CheckModels(ctx context.Context, client Client, cfg Config) error {
	installed, err := client.ListModels(ctx)
	if err != nil {
		return err
	}
	have := make(map[string]bool, len(installed))
	for _, m := range installed {
		have[NormalizeModel(m)] = true
	}
	roles := make([]string, 0, len(cfg.Models))
	for r := range cfg.Models {
		roles = append(roles, string(r))
	}
	sort.Strings(roles)
	var missing, hints []string
	seen := map[string]bool{}
	for _, r := range roles {
		m := strings.TrimSpace(cfg.Models[Role(r)])
		if m == "" || have[NormalizeModel(m)] {
			continue
		}
		missing = append(missing, fmt.Sprintf("%s model %q", r, m))
		if !seen[m] {
			seen[m] = true
			hints = append(hints, fmt.Sprintf("`ollama pull %s`", m))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	inst := strings.Join(installed, ", ")
	if inst == "" {
		inst = "none"
	}
	return &Error{
		Op:   "check",
		Kind: ErrModelMissing,
		Err:  fmt.Errorf("%s not installed (installed: %s)", strings.Join(missing, ", "), inst),
		Hint: "run " + strings.Join(hints, " and ") + ", or name a model the server has with --model (NLPROXY_MODEL) and --small-model (NLPROXY_SMALL_MODEL)",
	}
}

// NormalizeModel adds Ollama's implicit ":latest" tag to a model name (the
// fake Ollama in testkit/fakeollama matches names with it too).
func NormalizeModel(m string) string {
	m = strings.TrimSpace(m)
	if m == "" {
		return m
	}
	// The tag follows the last ':' unless that colon is a registry's port
	// (then a '/' follows it).
	if i := strings.LastIndex(m, ":"); i < 0 || strings.Contains(m[i:], "/") {
		return m + ":latest"
	}
	return m
}
