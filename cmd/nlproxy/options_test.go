package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nlproxy/nlproxy/internal/golden"
)

// TestOptionTable checks the table every setting comes from: each option
// has its flag, variable, YAML key, help and a default of its field's type;
// no name is used twice; every Config field is reachable from the table.
func TestOptionTable(t *testing.T) {
	flags, envs, keys := map[string]bool{}, map[string]bool{}, map[string]bool{}
	reached := map[string]bool{}
	var c Config
	for _, o := range options() {
		name := o.Flag + o.YAML + strings.Join(o.Env, "")
		if o.Help == "" {
			t.Errorf("%s: no help", name)
		}
		if len(o.Env) == 0 {
			t.Errorf("%s: no environment variable", name)
		}
		if (o.Flag == "" || o.YAML == "") && o.Only == "" {
			t.Errorf("%s: no flag or no YAML key, and Only does not say why", name)
		}
		if o.Flag != "" && o.YAML != "" && o.Only != "" {
			t.Errorf("%s: Only given though the option has a flag and a key", name)
		}
		for _, f := range []struct {
			kind string
			seen map[string]bool
			vals []string
		}{{"flag", flags, []string{o.Flag}}, {"variable", envs, o.Env}, {"YAML key", keys, []string{o.YAML}}} {
			for _, v := range f.vals {
				if v != "" && f.seen[v] {
					t.Errorf("%s %q used twice", f.kind, v)
				}
				f.seen[v] = true
			}
		}
		if o.Field == nil {
			if o.Flag != configOption {
				t.Errorf("%s: no field", name)
			}
			continue
		}
		ptr := o.Field(&c)
		if reflect.TypeOf(ptr).Kind() != reflect.Pointer {
			t.Errorf("%s: Field returns %T, not a pointer", name, ptr)
			continue
		}
		if o.Default != nil {
			if err := setDefault(ptr, o.Default); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		reached[fieldKey(ptr)] = true
	}
	for _, f := range configFields(reflect.ValueOf(&c).Elem(), "Config") {
		if !reached[fieldKey(f.ptr)] {
			t.Errorf("%s has no option", f.name)
		}
	}
}

type configField struct {
	name string
	ptr  any
}

// configFields lists the settable leaves of a Config: the fields of its
// nested option structs, not those structs themselves.
func configFields(v reflect.Value, prefix string) []configField {
	var out []configField
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		name := prefix + "." + v.Type().Field(i).Name
		if f.Kind() == reflect.Struct && strings.HasSuffix(f.Type().Name(), "Config") {
			out = append(out, configFields(f, name)...)
			continue
		}
		out = append(out, configField{name, f.Addr().Interface()})
	}
	return out
}

func fieldKey(ptr any) string {
	return fmt.Sprintf("%T@%p", ptr, ptr)
}

// TestOptionSources gives every option a value that is not its default by
// each of its ways, flag, variable and YAML key, and checks it lands in the
// option's field.
func TestOptionSources(t *testing.T) {
	defaults := defaultConfig()
	for _, o := range options() {
		if o.Field == nil {
			continue
		}
		text, yamlText := sampleValue(t, o.Field(&defaults))
		differs := func(t *testing.T, c Config) {
			t.Helper()
			if reflect.DeepEqual(reflect.ValueOf(o.Field(&c)).Elem().Interface(), reflect.ValueOf(o.Field(&defaults)).Elem().Interface()) {
				t.Errorf("value %q did not reach the field", text)
			}
		}
		if o.Flag != "" {
			t.Run("flag "+o.Flag, func(t *testing.T) {
				c := defaultConfig()
				fs := flag.NewFlagSet("test", flag.ContinueOnError)
				fs.SetOutput(io.Discard)
				after := registerFlags(fs, &c)
				if err := fs.Parse([]string{"--" + o.Flag + "=" + text}); err != nil {
					t.Fatal(err)
				}
				for _, f := range after {
					f()
				}
				differs(t, c)
			})
		}
		for _, key := range o.Env {
			t.Run("env "+key, func(t *testing.T) {
				c := defaultConfig()
				if err := applyEnv(&c, func(k string) string {
					if k == key {
						return text
					}
					return ""
				}); err != nil {
					t.Fatal(err)
				}
				differs(t, c)
			})
		}
		if o.YAML != "" {
			t.Run("yaml "+o.YAML, func(t *testing.T) {
				c := defaultConfig()
				if err := decodeYAML(&c, []byte(nestedYAML(o.YAML, yamlText))); err != nil {
					t.Fatal(err)
				}
				differs(t, c)
			})
		}
	}
}

// sampleValue is a value for the field ptr points to that no default
// has, as flag or variable text and as YAML.
func sampleValue(t *testing.T, ptr any) (text, yamlText string) {
	switch ptr.(type) {
	case *string:
		return "sample", "sample"
	case *int:
		return "7", "7"
	case *bool:
		return "true", "true"
	case *float64:
		return "0.5", "0.5"
	case *Duration:
		return "7s", "7s"
	case *[]string:
		return "a,b", "[a, b]"
	case *[]UpstreamEntry:
		return "db=postgres://u@h/db", "[{database: db, url: 'postgres://u@h/db'}]"
	case *map[string]string:
		return "db=max", "{db: max}"
	case *map[string]int:
		return "fixer=99", "{fixer: 99}"
	}
	t.Fatalf("no sample for %T", ptr)
	return "", ""
}

// nestedYAML writes value under a dotted key.
func nestedYAML(path, value string) string {
	parts := strings.Split(path, ".")
	var b strings.Builder
	for i, p := range parts {
		b.WriteString(strings.Repeat("  ", i) + p + ":")
		if i < len(parts)-1 {
			b.WriteString("\n")
		}
	}
	b.WriteString(" " + value + "\n")
	return b.String()
}

func TestDecodeYAMLErrors(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown top-level key", "listen: x\nlisten_adress: y\n", "line 2: unknown key listen_adress"},
		{"unknown engine key", "engine:\n  modle: x\n", "unknown key engine.modle"},
		{"key given twice", "listen: x\nlisten: y\n", "line 2: listen is given twice"},
		{"misspelt key in an upstream", "upstreams:\n  - url: postgres://h/d\n    databse: d\n", "databse"},
		{"section that is not a mapping", "engine: 3\n", "engine: want keys and values"},
		{"bad duration", "idle_timeout: soon\n", "idle_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := defaultConfig()
			err := decodeYAML(&c, []byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
	c := defaultConfig()
	if err := decodeYAML(&c, []byte("# nothing set\n")); err != nil || !reflect.DeepEqual(c, defaultConfig()) {
		t.Errorf("a file of comments: err %v, config changed %v", err, !reflect.DeepEqual(c, defaultConfig()))
	}
}

// TestConfigurationDoc keeps docs/configuration.md what the table says;
// -update rewrites it.
func TestConfigurationDoc(t *testing.T) {
	golden.CheckFile(t, "../../docs/configuration.md", configDoc())
}

// TestDocumentedYAML decodes every YAML example in the README and docs/ as a
// configuration file: a key the table does not know fails.
func TestDocumentedYAML(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	examples := 0
	for _, path := range append(files, "../../README.md") {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, block := range strings.Split(string(raw), "```yaml\n")[1:] {
			body, _, ok := strings.Cut(block, "```")
			if !ok {
				t.Fatalf("%s: YAML example %d is not closed", path, i+1)
			}
			examples++
			c := defaultConfig()
			if err := decodeYAML(&c, []byte(body)); err != nil {
				t.Errorf("%s, YAML example %d: %v", path, i+1, err)
			}
		}
	}
	if examples == 0 {
		t.Error("no YAML example found in the README or docs/")
	}
}
