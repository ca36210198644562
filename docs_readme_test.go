package layer0_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The README names the Go version go.mod requires, and the documentation speaks of the product
// alone: no link or pointer out of the repository to a description or tracker it does not hold.
func TestReadmeAndDocsHygiene(t *testing.T) {
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := "**Go " + string(m[1]) + "**"; !strings.Contains(string(readme), want) {
		t.Errorf("README.md's prerequisites do not name %s (go.mod's go line)", want)
	}
	docs, _ := filepath.Glob("docs/*.md")
	outside := regexp.MustCompile(`(?i)\.\./shared|SYSTEM\.md|source article|\bissue #?\d+|\bissues/\d+`)
	for _, p := range append(docs, "README.md") {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if loc := outside.FindString(line); loc != "" {
				t.Errorf("%s:%d points outside the repository (%q)", p, i+1, loc)
			}
		}
	}
}
