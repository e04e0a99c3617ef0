// Package golden compares test output with files under testdata/ (or a
// generated file elsewhere) and rewrites them when the test binary runs
// with -update.
package golden

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

// update is the conventional golden-file flag; it only exists in test
// binaries that import this package.
var update = flag.Bool("update", false, "rewrite golden files in testdata/ instead of comparing")

// Check compares got with testdata/<name>.golden, or writes it with -update.
func Check(t testing.TB, name, got string) {
	t.Helper()
	CheckFile(t, filepath.Join("testdata", name+".golden"), got)
}

// CheckFile compares got with the file at path, or writes it with -update:
// for generated files kept outside testdata/, such as documentation.
func CheckFile(t testing.TB, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the output below; if the change is intended, run go test with -update and review the diff:\n%s", path, got)
	}
}

// Updating reports whether the test binary runs with -update, for tests that
// rewrite a file by other rules than an exact comparison.
func Updating() bool { return *update }
