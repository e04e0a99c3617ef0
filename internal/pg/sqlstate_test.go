package pg

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// sqlstateLike is a SQLSTATE: one of Postgres's classes (errcodes.txt)
// and a three-character subclass. Other five-character strings are not
// codes: a port ("11434", no such class), a memory size ("256MB",
// sizeLike).
var (
	sqlstateLike = regexp.MustCompile(`^(00|01|02|03|08|09|0A|0B|0F|0L|0P|0Z|20|21|22|23|24|25|26|27|28|2B|2D|2F|34|38|39|3B|3D|3F|40|42|44|53|54|55|57|58|72|F0|HV|P0|XX)[0-9A-Z]{3}$`)
	sizeLike     = regexp.MustCompile(`^[0-9]+[KMGT]B$`)
)

func isSQLSTATE(s string) bool { return sqlstateLike.MatchString(s) && !sizeLike.MatchString(s) }

// TestNoSQLSTATELiterals keeps every SQLSTATE code named in this package:
// a code written as a literal anywhere else in the project's code (tests
// may quote the codes they assert on) fails here, naming the place.
func TestNoSQLSTATELiterals(t *testing.T) {
	root := moduleRoot(t)
	self, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch name := d.Name(); {
			case path == self, name == "testdata", name == "vendor", path != root && strings.HasPrefix(name, "."):
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			if s, err := strconv.Unquote(lit.Value); err == nil && isSQLSTATE(s) {
				rel, _ := filepath.Rel(root, fset.Position(lit.Pos()).Filename)
				t.Errorf("%s:%d: SQLSTATE %q written as a literal; name it in internal/pg and use the name", rel, fset.Position(lit.Pos()).Line, s)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("scanned %d files under %s, expected the whole module", files, root)
	}
}

// TestSQLStateLikeMatchesCodes shows the scan's pattern tells codes from
// other five-character strings, so the check above can fail and does not
// cry wolf.
func TestSQLStateLikeMatchesCodes(t *testing.T) {
	for _, s := range []string{CodeInternalError, CodeProtocolViolation, CodeAbstained, CodeInvalidPassword, "0A000", "57014"} {
		if !isSQLSTATE(s) {
			t.Errorf("%q not taken for a SQLSTATE", s)
		}
	}
	for _, s := range []string{"11434", "128MB", "256MB", "KOI8R", "WIN866", "ERROR", "4250", "425011"} {
		if isSQLSTATE(s) {
			t.Errorf("%q taken for a SQLSTATE", s)
		}
	}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the package")
		}
		dir = parent
	}
}
