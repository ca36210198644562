package e2e

import (
	"os"
	"regexp"
	"testing"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/config"
)

// TestEnginesDocConfigs keeps docs/engines.md honest: every YAML example in it is a complete
// configuration that loads and builds a gateway.
func TestEnginesDocConfigs(t *testing.T) {
	doc, err := os.ReadFile("../docs/engines.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(doc, -1)
	if len(blocks) < 7 {
		t.Fatalf("got %d YAML examples, want one per engine server (7)", len(blocks))
	}
	for _, k := range []string{"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "LAYER0_CORE_KEY"} {
		t.Setenv(k, "doc-test-key")
	}
	// The custom kind of the "Custom engines" example, built here as a sim.
	tagged := layer0.WithEngine("tagged", func(name string, cfg layer0.EngineConfig) (layer0.Engine, error) {
		cfg.Kind, cfg.URL, cfg.Options = layer0.KindSim, "", nil
		return layer0.NewBuiltinEngine(name, cfg)
	})
	for i, b := range blocks {
		cfg, err := config.Known{EngineKinds: []string{"tagged"}}.Parse(b[1])
		if err != nil {
			t.Errorf("example %d does not load: %v\n%s", i, err, b[1])
			continue
		}
		if _, err := layer0.New(cfg, tagged); err != nil {
			t.Errorf("example %d does not build: %v", i, err)
		}
	}
}
