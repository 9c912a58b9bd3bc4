package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// maxFilesPerType: a type's methods live in at most this many files
// (CONTRIBUTING.md), so that whoever changes a type reads it whole.
const maxFilesPerType = 3

// sourceDirs returns every directory under the module's cmd/, hack/, pkg/
// and test/ that holds Go files, relative to the module root.
func sourceDirs(t *testing.T) []string {
	t.Helper()
	var dirs []string
	for _, top := range []string{"cmd", "hack", "pkg", "test"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			if d.IsDir() {
				if files, _ := filepath.Glob(filepath.Join(path, "*.go")); len(files) > 0 {
					rel, _ := filepath.Rel(root, path)
					dirs = append(dirs, rel)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("walk %s: %v", top, err)
		}
	}
	if len(dirs) == 0 {
		t.Fatal("no Go package found")
	}
	return dirs
}

// root is the module root, seen from this package's directory.
var root = filepath.Join("..", "..")

// productionFiles lists dir's non-test Go files (base names, sorted).
func productionFiles(t *testing.T, dir string) []string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, m := range matches {
		if !strings.HasSuffix(m, "_test.go") {
			files = append(files, filepath.Base(m))
		}
	}
	sort.Strings(files)
	return files
}

// TestMethodsInFewFiles: no type of pkg/ or cmd/ has methods in more than
// maxFilesPerType files.
func TestMethodsInFewFiles(t *testing.T) {
	checked := 0
	for _, dir := range sourceDirs(t) {
		if !strings.HasPrefix(dir, "pkg/") && !strings.HasPrefix(dir, "cmd/") {
			continue
		}
		byType := map[string]map[string]bool{}
		fset := token.NewFileSet()
		for _, name := range productionFiles(t, dir) {
			f, err := parser.ParseFile(fset, filepath.Join(root, dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatalf("parse %s/%s: %v", dir, name, err)
			}
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Recv == nil || len(fn.Recv.List) == 0 {
					continue
				}
				typ := receiverType(fn.Recv.List[0].Type)
				if byType[typ] == nil {
					byType[typ] = map[string]bool{}
				}
				byType[typ][name] = true
				checked++
			}
		}
		for typ, files := range byType {
			if len(files) > maxFilesPerType {
				names := make([]string, 0, len(files))
				for f := range files {
					names = append(names, f)
				}
				sort.Strings(names)
				t.Errorf("%s: the methods of %s are spread over %d files (%s); keep a type's methods in at most %d files",
					dir, typ, len(files), strings.Join(names, ", "), maxFilesPerType)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no method found: the walk read nothing")
	}
}

func receiverType(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return receiverType(x.X)
	case *ast.IndexExpr:
		return receiverType(x.X)
	case *ast.IndexListExpr:
		return receiverType(x.X)
	case *ast.Ident:
		return x.Name
	}
	return "?"
}

var goFileName = regexp.MustCompile(`\b[a-z0-9_]+\.go\b`)

// TestDocFileMaps: a doc.go either names none of its package's files or
// all of them, and names no file that does not exist.
func TestDocFileMaps(t *testing.T) {
	docs := 0
	for _, dir := range sourceDirs(t) {
		b, err := os.ReadFile(filepath.Join(root, dir, "doc.go"))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		docs++
		named := map[string]bool{}
		for _, m := range goFileName.FindAllString(string(b), -1) {
			named[m] = true
		}
		if len(named) == 0 {
			continue
		}
		files := productionFiles(t, dir)
		var missing, stale []string
		for _, f := range files {
			if f != "doc.go" && !named[f] {
				missing = append(missing, f)
			}
		}
		for f := range named {
			if !slices.Contains(files, f) {
				stale = append(stale, f)
			}
		}
		sort.Strings(stale)
		if len(missing) > 0 {
			t.Errorf("%s/doc.go has a file map that misses %s: name every file or none", dir, strings.Join(missing, ", "))
		}
		if len(stale) > 0 {
			t.Errorf("%s/doc.go names %s, which the package does not have", dir, strings.Join(stale, ", "))
		}
	}
	if docs == 0 {
		t.Fatal("no doc.go found")
	}
}

// maxPackageLines is the hard edge of the package-size guide (~3,000 lines
// of non-test code, CONTRIBUTING.md).
const maxPackageLines = 3500

// largePackages may pass maxPackageLines, each with the reason, the plan
// and a ceiling it may not pass either (an exception must shrink, not grow
// unnoticed).
var largePackages = map[string]struct {
	why     string
	ceiling int
}{
	"pkg/gang/placement": {
		why: "one job (one placement decision: member search, rail alignment, segments, budgets, pack order, explanation); " +
			"its leaves (the cluster index, the segment planner, the cost memory, the rail search, member order, extended resources) already left; " +
			"the member search (search*.go) and the explanation (explain.go, segexplain.go) are the next candidates",
		ceiling: 5400,
	},
}

// TestPackageSizes: no package of pkg/ or cmd/ passes maxPackageLines of
// non-test code unless largePackages names it, and every name there is
// still large (an exception that no longer applies is removed).
func TestPackageSizes(t *testing.T) {
	seen := 0
	for _, dir := range sourceDirs(t) {
		if !strings.HasPrefix(dir, "pkg/") && !strings.HasPrefix(dir, "cmd/") {
			continue
		}
		lines := 0
		for _, name := range productionFiles(t, dir) {
			b, err := os.ReadFile(filepath.Join(root, dir, name))
			if err != nil {
				t.Fatal(err)
			}
			lines += strings.Count(string(b), "\n")
		}
		seen++
		large, excepted := largePackages[dir]
		switch {
		case excepted && lines > large.ceiling:
			t.Errorf("%s has %d lines of non-test code, past its exception's ceiling %d (%s): split it before it grows", dir, lines, large.ceiling, large.why)
		case lines > maxPackageLines && !excepted:
			t.Errorf("%s has %d lines of non-test code (guide: ~3,000, edge %d): split it into rooms (CONTRIBUTING.md)", dir, lines, maxPackageLines)
		case lines <= maxPackageLines && excepted:
			t.Errorf("%s has %d lines now: remove it from largePackages", dir, lines)
		}
	}
	if seen == 0 {
		t.Fatal("no package measured")
	}
}
