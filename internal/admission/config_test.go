package admission

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/route"
)

// Keys of one team are one tenant of the admission queue: a team cannot take more of a band by
// spreading its requests over more keys.
func TestFromConfigTeamIsTheTenant(t *testing.T) {
	cfg := config.Default()
	cfg.Keys = []config.Key{{Name: "a1", Team: "alpha"}, {Name: "a2", Team: "alpha"}, {Name: "solo"}}
	g, err := FromConfig(cfg, func(string) *route.Replica { return nil }, nil, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"a1": "alpha", "a2": "alpha", "solo": "solo", "": "anonymous"} {
		if got := tenantOf(key, g.keys[key]); got != want {
			t.Errorf("key %q: tenant %q, want %q", key, got, want)
		}
	}
}
