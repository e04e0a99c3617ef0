package redact

import (
	"regexp"
	"strings"
)

// Credentials removes credentials from text a remote server sent back (an
// error body that echoes the request's Authorization header, a URL with a
// password): the given secrets wherever they appear, and whatever follows
// the usual ways of writing one (Bearer/Basic tokens, Authorization and
// API-key fields, URL userinfo). A log line, a page or a client's error
// may then quote the rest of the text.
func Credentials(s string, secrets ...string) string {
	for _, sec := range secrets {
		if len(sec) >= 4 { // shorter would blank ordinary words
			s = strings.ReplaceAll(s, sec, Withheld)
		}
	}
	for _, re := range credentialPatterns {
		s = re.ReplaceAllString(s, "${1}"+Withheld+"${2}")
	}
	return s
}

// Withheld stands in for a credential removed from text.
const Withheld = "[credential withheld]"

// credentialPatterns keep their first group (the label) and the second
// (what ends the credential, when it is part of the match) and replace what
// is between.
var credentialPatterns = []*regexp.Regexp{
	// Authorization: Bearer x / "authorization":"Basic x" / Proxy-Authorization
	regexp.MustCompile(`(?i)((?:proxy-)?authorization["']?\s*[:=]\s*["']?)[^"',;\r\n}\]]+`),
	regexp.MustCompile(`(?i)(\b(?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]{8,}`),
	regexp.MustCompile(`(?i)((?:api[_-]?key|x-api-key|access[_-]?token|password|secret)["']?\s*[:=]\s*["']?)[^"'\s,;&}\]]+`),
	// scheme://user:password@host
	regexp.MustCompile(`(?i)(\b[a-z][a-z0-9+.-]*://[^/\s:@]*:)[^@\s/]+(@)`),
}
