package main

import (
	"net/url"
	"regexp"
	"strings"

	"go.uber.org/zap"
)

// passwordFlags names the options given on the command line with a
// connection string that carries a password (never the values). A flag's
// value shows in the process list (ps, /proc) to every local user, so this
// is reported at start; the same value from the environment (NLPROXY_…),
// the YAML file or a password file (PGPASSFILE, ~/.pgpass) is not visible so.
func passwordFlags(args []string) []string {
	var out []string
	for _, name := range []string{"catalog-dsn", "authenticator", "catalog-store"} {
		for _, v := range flagValues(args, name) {
			if dsnHasPassword(v) {
				out = append(out, name)
				break
			}
		}
	}
	return out
}

// flagValues is every value given to -name/--name on the command line.
func flagValues(args []string, name string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		trimmed := strings.TrimLeft(a, "-")
		if trimmed == a {
			continue
		}
		if v, ok := strings.CutPrefix(trimmed, name+"="); ok {
			out = append(out, v)
		} else if trimmed == name && i+1 < len(args) {
			out = append(out, args[i+1])
			i++
		}
	}
	return out
}

// dsnHasPassword reports whether a libpq URL or keyword DSN (an
// authenticator's may be prefixed "database=") names a password.
func dsnHasPassword(v string) bool {
	v = parseUpstreamEntry0(v)
	if strings.Contains(v, "://") {
		u, err := url.Parse(v)
		if err != nil {
			return strings.Contains(v, "@") // unparsable: assume the worst
		}
		_, set := u.User.Password()
		return set || u.Query().Has("password")
	}
	return keywordPassword.MatchString(v)
}

// keywordPassword finds password=… in a keyword DSN.
var keywordPassword = regexp.MustCompile(`(^|\s)password\s*=`)

// parseUpstreamEntry0 is the DSN of a "database=DSN" entry, or v.
func parseUpstreamEntry0(v string) string {
	e, err := parseUpstreamEntry(v)
	if err != nil {
		return v
	}
	return e.URL
}

// warnPasswordFlags logs, once per option, that a password was given on
// the command line; the value is never logged.
func warnPasswordFlags(log *zap.Logger, names []string) {
	for _, n := range names {
		log.Warn("a password is given on the command line, where the process list shows it to every local user; "+
			"give it in the environment (NLPROXY_"+strings.ToUpper(strings.ReplaceAll(n, "-", "_"))+"), the configuration file, or a password file (PGPASSFILE, ~/.pgpass) instead",
			zap.String("option", "--"+n))
	}
}
