package main

import (
	"fmt"
	"reflect"
	"strings"
)

// configDocHeader opens docs/configuration.md.
const configDocHeader = `# Configuration reference

<!-- Generated from the option table in cmd/nlproxy/options.go; do not edit.
     Refresh with: go test ./cmd/nlproxy -run TestConfigurationDoc -update -->

This page is generated from nlproxy's option table (` + "`cmd/nlproxy/options.go`" + `), the
one place an option of ` + "`nlproxy serve`" + ` is defined: its flag, environment variable, YAML
key, default and ` + "`--help`" + ` text all come from its entry. **Adding an option is adding
one entry to that table** (and the ` + "`Config`" + ` field it fills); a test fails until this page
is regenerated with ` + "`go test ./cmd/nlproxy -run TestConfigurationDoc -update`" + `.

Every option can be given three ways. Precedence, highest first:

1. the command-line flag (` + "`--max-conns 200`" + `; a bare ` + "`--flag`" + ` turns a switch on);
2. the environment variable (` + "`NLPROXY_MAX_CONNS=200`" + `);
3. the YAML file named by ` + "`--config`" + ` or ` + "`NLPROXY_CONFIG`" + ` (` + "`max_conns: 200`" + `; a dotted
   key is nested: ` + "`engine.max_asks`" + ` is ` + "`max_asks:`" + ` under ` + "`engine:`" + `); an unknown key is an error;
4. the default.

Durations are Go durations (` + "`90s`" + `, ` + "`10m`" + `). Lists are comma-separated in flags
and variables unless the table says otherwise, YAML sequences in the file. Connections to
Postgres also read the libpq variables (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGPASSFILE or
~/.pgpass, PGSSLMODE, …) for what their URL leaves out.
`

// sectionTitle titles the table of a YAML section.
func sectionTitle(section string) string {
	switch section {
	case "":
		return "Proxy"
	case "engine":
		return "Engine: natural-language questions"
	case "engine.ask_all":
		return "Questions across databases: ask(all)"
	case "engine.optimize":
		return "Optimizer: optimize: and the max profile"
	case "ops":
		return "Operations: admin listener, audit log, shared catalogs"
	}
	return section
}

// configDoc renders docs/configuration.md from the option table.
func configDoc() string {
	var b strings.Builder
	b.WriteString(configDocHeader)
	defaults := defaultConfig()
	section := "-"
	for _, o := range options() {
		s := yamlSection(o.YAML, section)
		if s != section {
			section = s
			fmt.Fprintf(&b, "\n## %s\n\n", sectionTitle(s))
			b.WriteString("| Flag | Environment | YAML key | Default | Description |\n")
			b.WriteString("|---|---|---|---|---|\n")
		}
		flagCell, yamlCell := "—", "—"
		if o.Flag != "" {
			flagCell = "`--" + o.Flag + "`"
		}
		if o.YAML != "" {
			yamlCell = "`" + o.YAML + "`"
		}
		envs := make([]string, len(o.Env))
		for i, e := range o.Env {
			envs[i] = "`" + e + "`"
		}
		desc := o.Help + "."
		if o.EnvForm != "" {
			desc += " The variable is " + o.EnvForm + "."
		}
		if o.Only != "" {
			desc += " Not a flag or key: " + o.Only + "."
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", flagCell, strings.Join(envs, " or "), yamlCell,
			docDefault(o, defaults), cell(desc))
	}
	return b.String()
}

// yamlSection is the section of a YAML path; an option without a key
// stays in the section before it.
func yamlSection(path, prev string) string {
	if path == "" {
		if prev == "-" {
			return ""
		}
		return prev
	}
	if i := strings.LastIndex(path, "."); i >= 0 {
		return path[:i]
	}
	return ""
}

// docDefault is the reference's Default cell: the table's description of a
// computed default, else the value in the default configuration.
func docDefault(o option, defaults Config) string {
	if o.DefaultDoc != "" {
		return cell(o.DefaultDoc)
	}
	if o.Field == nil {
		return "none"
	}
	v := reflect.ValueOf(o.Field(&defaults)).Elem()
	if v.IsZero() && (v.Kind() == reflect.String || v.Kind() == reflect.Slice || v.Kind() == reflect.Map) {
		return "none"
	}
	return "`" + fmt.Sprint(v.Interface()) + "`"
}

// cell keeps text inside one Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}
