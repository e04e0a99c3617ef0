package guard

import (
	_ "embed"
	"fmt"
	"path"
	"strings"
	"sync"
)

// reviewedBuiltinsText lists, one "name volatility" a line, the pg_catalog
// functions whose names the guard's rules (deny list, volatility,
// harmlessVolatile) were reviewed against. A built-in a newer server adds is
// not on it and is refused until reviewed: a minor release can add a
// function (15.20 added binary_upgrade_set_next_attribute_versions), and
// the guard must not allow what nobody has looked at.
//
//go:embed reviewed_builtins.txt
var reviewedBuiltinsText string

// reviewedBuiltins returns the reviewed pg_catalog functions: name →
// volatility at review time.
var reviewedBuiltins = sync.OnceValue(func() map[string]byte {
	m := map[string]byte{}
	for _, line := range strings.Split(reviewedBuiltinsText, "\n") {
		name, vol, ok := strings.Cut(line, " ")
		if ok && len(vol) == 1 {
			m[name] = vol[0]
		}
	}
	return m
})

// Volatility of a function as pg_proc.provolatile spells it.
const (
	Immutable byte = 'i'
	Stable    byte = 's'
	Volatile  byte = 'v'
)

// Catalog is what the guard needs to know of the database (the catalog
// package provides it from pg_proc and pg_views of the server itself).
type Catalog interface {
	// BuiltinVolatility returns the most volatile provolatile among the
	// pg_catalog functions called name (lowercase), false if pg_catalog has
	// no function of that name.
	BuiltinVolatility(name string) (byte, bool)
	// ViewDefinitions returns the SELECT text of every user view called
	// name in schema ("" = in any schema).
	ViewDefinitions(schema, name string) []string
}

// Builtins is a Catalog of pg_catalog functions only (no views): name →
// most volatile provolatile over its overloads.
type Builtins map[string]byte

// BuiltinVolatility implements Catalog.
func (b Builtins) BuiltinVolatility(name string) (byte, bool) {
	v, ok := b[name]
	return v, ok
}

// ViewDefinitions implements Catalog: Builtins knows no views.
func (Builtins) ViewDefinitions(string, string) []string { return nil }

// harmlessVolatile are volatile built-ins reviewed to have no effect beyond
// their result: the short allow-list the non-volatile rule needs.
var harmlessVolatile = map[string]bool{
	"random":          true,
	"random_normal":   true,
	"clock_timestamp": true,
	"timeofday":       true,
	"gen_random_uuid": true,
}

// deniedFunctions are refused even when pg_proc calls them stable or
// immutable, or an operator allows them: they run SQL given as text (so
// the guard never sees it), touch files, other sessions, replication or
// WAL, or change pages even inside a READ ONLY transaction. Patterns match
// the unqualified, lowercased name (path.Match syntax).
var deniedFunctions = [...]string{
	"nextval", "setval", "currval", "lastval",
	"pg_sleep*",
	"dblink*",
	"lo_*", "loread", "lowrite",
	"set_config", "setseed",
	"pg_terminate_backend", "pg_cancel_backend", "pg_signal_backend",
	"pg_reload_conf", "pg_rotate_logfile*",
	"pg_read_file", "pg_read_binary_file", "pg_ls_*", "pg_stat_file", "pg_file_*",
	"pg_logical_*", "pg_create_*", "pg_drop_replication_slot", "pg_copy_*",
	"pg_replication_slot_advance", "pg_replication_origin_*",
	"pg_advisory_*", "pg_try_advisory_*",
	"pg_notify",
	"query_to_xml*", "table_to_xml*", "cursor_to_xml*", "schema_to_xml*", "database_to_xml*",
	"ts_stat", "ts_rewrite", // both execute a query given as text
	"copy_*",
	"pg_switch_wal", "pg_switch_xlog", "pg_promote", "pg_wal_replay_*",
	"pg_backup_*", "pg_start_backup", "pg_stop_backup",
	"pg_stat_reset*", "pg_stat_*_reset*", "pg_log_backend_memory_contexts",
	"pg_import_system_collations", "pg_export_snapshot",
	// Assign a transaction ID even inside READ ONLY: a flood of them is
	// wraparound pressure.
	"txid_current", "pg_current_xact_id",
	// Write index pages even in a READ ONLY transaction.
	"brin_summarize_new_values", "brin_summarize_range", "brin_desummarize_range",
	"gin_clean_pending_list",
	"pg_prewarm", "pg_visibility*", "pg_truncate_visibility_map",
	"bt_index_*check", "heap_force_*", "pg_surgery*",
}

// funcVerdict is the guard's decision on one function call.
type funcVerdict struct {
	reason string // "" = accepted
	// builtin: the call resolves to pg_catalog and is sealed as
	// pg_catalog.name, so a same-named function earlier on the session's
	// search_path cannot stand in for it.
	builtin bool
}

// judgeFunction decides a call of parts (the name as written, e.g. ["lower"]
// or ["public", "f"]).
func judgeFunction(parts []string, opts *Options, deny []string) funcVerdict {
	name := strings.ToLower(parts[len(parts)-1])
	schema := ""
	if len(parts) > 1 {
		schema = strings.ToLower(parts[len(parts)-2])
	}
	written := strings.Join(parts, ".")
	for _, p := range deny {
		if ok, _ := path.Match(strings.ToLower(p), name); ok {
			return funcVerdict{reason: "function " + written + " is not allowed"}
		}
	}
	allowed := opts.allowed(schema, name)
	if schema != "" && schema != "pg_catalog" {
		if allowed {
			return funcVerdict{}
		}
		return funcVerdict{reason: fmt.Sprintf("function %s is not a built-in function; an operator can allow it by name", written)}
	}
	if opts.Catalog == nil {
		if allowed || harmlessVolatile[name] {
			return funcVerdict{builtin: !allowed}
		}
		return funcVerdict{reason: "function " + written + " cannot be checked: no function catalog"}
	}
	vol, ok := opts.Catalog.BuiltinVolatility(name)
	switch {
	case !ok && allowed && schema == "":
		return funcVerdict{} // an operator-allowed function found through search_path
	case !ok:
		return funcVerdict{reason: fmt.Sprintf("function %s is not a built-in function; an operator can allow it by name", written)}
	case !allowed && !harmlessVolatile[name] && !reviewed(name):
		return funcVerdict{reason: fmt.Sprintf("function %s is a built-in this nlproxy has not reviewed (newer than its list); an operator can allow it by name", written)}
	case vol == Volatile && !harmlessVolatile[name] && !allowed:
		return funcVerdict{reason: fmt.Sprintf("function %s is volatile (it may change state)", written)}
	}
	return funcVerdict{builtin: true}
}

// reviewed reports whether name is on the reviewed list.
func reviewed(name string) bool {
	_, ok := reviewedBuiltins()[name]
	return ok
}

// allowed reports whether an operator allowed the function by name.
func (o *Options) allowed(schema, name string) bool {
	for _, p := range o.AllowFunctions {
		p = strings.ToLower(p)
		target := name
		if strings.Contains(p, ".") {
			if schema == "" {
				continue // a qualified allowance needs a qualified call
			}
			target = schema + "." + name
		}
		if ok, _ := path.Match(p, target); ok {
			return true
		}
	}
	return false
}

// validatePatterns rejects malformed patterns, which would never match and
// so silently allow (deny list) or deny (allow list) everything.
func validatePatterns(kind string, ps []string) error {
	for _, p := range ps {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("guard: %s pattern %q: %w", kind, p, err)
		}
	}
	return nil
}
