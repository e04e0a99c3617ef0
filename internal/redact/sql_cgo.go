//go:build cgo

package redact

import pg_query "github.com/pganalyze/pg_query_go/v5"

// SQL replaces every constant in sql with a parameter symbol, as
// pg_stat_statements shows queries; SQL that does not parse is withheld.
func SQL(sql string) string {
	if sql == "" {
		return ""
	}
	out, err := pg_query.Normalize(sql)
	if err != nil {
		return "[redacted]"
	}
	return out
}
