package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/layer0ai/layer0"
)

// The README names the Go version go.mod requires, and the documentation speaks of the product
// alone: no link or pointer out of the repository to a description or tracker it does not hold.
func TestReadmeAndDocsHygiene(t *testing.T) {
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := "**Go " + string(m[1]) + "**"; !strings.Contains(string(readme), want) {
		t.Errorf("README.md's prerequisites do not name %s (go.mod's go line)", want)
	}
	docs, _ := filepath.Glob("../docs/*.md")
	outside := regexp.MustCompile(`(?i)\.\./shared|SYSTEM\.md|source article|\bissue #?\d+|\bissues/\d+`)
	for _, p := range append(docs, "../README.md") {
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

// The README runs the default, then the keyed demo, then the prefix-cache pool: each listens on a
// port of its own, so following it in order never meets "address already in use"; and it says
// how to get the layer0 binary the docs call.
func TestExamplesListenSideBySide(t *testing.T) {
	seen := map[string]string{layer0.DefaultConfig().Server.Addr: "the default"}
	examples, _ := filepath.Glob("../examples/*.yaml")
	if len(examples) < 2 {
		t.Fatalf("examples: %v", examples)
	}
	for _, p := range examples {
		cfg, err := layer0.LoadConfig(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if other, ok := seen[cfg.Server.Addr]; ok {
			t.Errorf("%s listens on %s, as %s does", p, cfg.Server.Addr, other)
		}
		seen[cfg.Server.Addr] = p
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "go install ./cmd/layer0") {
		t.Error("README.md does not say how to install the layer0 binary")
	}
}
