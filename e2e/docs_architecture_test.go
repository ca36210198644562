package e2e

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestArchitectureNamesEveryPackage: docs/architecture.md's table names every package of the
// module (not the modules of their own beside it), by its path or as one of the names listed in its parent's `parent/…` row.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	doc, err := os.ReadFile("../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	dirs := map[string]bool{}
	err = filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != ".." {
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir // a module of its own (a tool's pin, the Helm chart's test)
			}
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") {
			dirs[filepath.ToSlash(filepath.Dir(p))] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir := range dirs {
		rel := strings.TrimPrefix(strings.TrimPrefix(dir, ".."), "/")
		if rel == "" || strings.HasPrefix(rel, "examples") {
			continue // the root is the `layer0` row; examples are programs, not packages of the map
		}
		if strings.Contains(text, "`"+rel+"`") || strings.Contains(text, "`"+rel+"/…`") {
			continue
		}
		parent, name := filepath.Dir(rel), filepath.Base(rel)
		row := rowOf(text, "`"+parent+"/…`")
		if row == "" || !strings.Contains(row, "`"+name+"`") {
			t.Errorf("docs/architecture.md does not name the package %s", rel)
		}
	}
}

// rowOf returns the line of text that contains s, or "".
func rowOf(text, s string) string {
	i := strings.Index(text, s)
	if i < 0 {
		return ""
	}
	start := strings.LastIndexByte(text[:i], '\n') + 1
	end := strings.IndexByte(text[i:], '\n')
	if end < 0 {
		return text[start:]
	}
	return text[start : i+end]
}
