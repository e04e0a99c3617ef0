package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set at build time; the Makefile passes
// -ldflags "-X main.version=$(git describe --tags --always --dirty) -X main.commit=$(git rev-parse --short HEAD)".
// Left empty, buildVersion falls back to what the Go toolchain recorded.
var (
	version string
	commit  string
)

// buildVersion resolves the version and commit: the -X values when set, else
// the module version (go install …@vX) and the VCS revision `go build`
// stamps in a git checkout, else "dev" and "unknown".
func buildVersion(ldVersion, ldCommit string, info *debug.BuildInfo) (v, c string) {
	v, c = ldVersion, ldCommit
	if info != nil {
		if v == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v = info.Main.Version
		}
		if c == "" {
			var rev, dirty string
			for _, s := range info.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					if s.Value == "true" {
						dirty = "-dirty"
					}
				}
			}
			if len(rev) > 12 {
				rev = rev[:12]
			}
			if rev != "" {
				c = rev + dirty
			}
		}
	}
	if v == "" {
		v = "dev"
	}
	if c == "" {
		c = "unknown"
	}
	return v, c
}

// versionInfo is this binary's version and commit.
func versionInfo() (v, c string) {
	info, _ := debug.ReadBuildInfo()
	return buildVersion(version, commit, info)
}

// versionLine is what `nlproxy version` and `nlproxy --version` print.
func versionLine() string {
	v, c := versionInfo()
	return fmt.Sprintf("nlproxy %s (commit %s, %s)", v, c, runtime.Version())
}
