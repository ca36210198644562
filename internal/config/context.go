package config

// Context is a model's policy for an input that no context window of its fallback chain holds.
type Context struct {
	// Overflow is refuse (a 400 stating the sizes) or truncate (cut the input to the largest
	// window). Default refuse; a request's truncate directive allows cutting either way.
	Overflow string `yaml:"overflow"`
	// Split is how a text is cut: semantic (at section, paragraph and sentence boundaries,
	// never inside a fenced code block) or fixed (at the token budget, on a character
	// boundary). Default semantic.
	Split string `yaml:"split"`
	// MaxTokensPerShard caps the tokens kept of any one text that has to be cut. Default 8192.
	MaxTokensPerShard int `yaml:"max_tokens_per_shard"`
}

// Values of Context.Overflow and Context.Split.
const (
	OverflowRefuse   = "refuse"
	OverflowTruncate = "truncate"
	SplitSemantic    = "semantic"
	SplitFixed       = "fixed"
	// DefaultMaxTokensPerShard is Context.MaxTokensPerShard's default.
	DefaultMaxTokensPerShard = 8192
)

// OffloadTarget is where a request named by an offload directive or X-Offload-Target header
// goes: a model, alias or split of this configuration. Clients name targets; they never give
// an address.
type OffloadTarget struct {
	// Model is the name the request is served as instead of the one it asked for. Required.
	Model string `yaml:"model"`
}

func (c *Config) setContextDefaults() {
	for id, m := range c.Models {
		cx := &m.Context
		setDefault(&cx.Overflow, OverflowRefuse)
		setDefault(&cx.Split, SplitSemantic)
		setDefault(&cx.MaxTokensPerShard, DefaultMaxTokensPerShard)
		c.Models[id] = m
	}
}

func (c *Config) validateContext(errs *Errors) {
	for _, id := range sortedKeys(c.Models) {
		cx := c.Models[id].Context
		p := "models." + id + ".context"
		switch cx.Overflow {
		case OverflowRefuse, OverflowTruncate:
		default:
			errs.add(p+".overflow", "must be refuse or truncate, got %q", cx.Overflow)
		}
		switch cx.Split {
		case SplitSemantic, SplitFixed:
		default:
			errs.add(p+".split", "must be semantic or fixed, got %q", cx.Split)
		}
		if cx.MaxTokensPerShard < 1 {
			errs.add(p+".max_tokens_per_shard", "must be positive, got %d", cx.MaxTokensPerShard)
		}
	}
	for _, name := range sortedKeys(c.OffloadTargets) {
		t := c.OffloadTargets[name]
		p := "offload_targets." + name
		if !validTargetName(name) {
			errs.add(p, "a target's name is 1 to 64 letters, digits, '.', '_' or '-', got %q", name)
		}
		if t.Model == "" {
			errs.add(p+".model", "required")
			continue
		}
		_, model := c.Models[t.Model]
		_, alias := c.Aliases[t.Model]
		_, split := c.Splits[t.Model]
		if !model && !alias && !split {
			errs.add(p+".model", "unknown model %q (want a model, alias or split of this file)", t.Model)
		}
	}
}

// validTargetName reports whether name can be an offload target's: what a client sends in a
// header or a directive, never an address.
func validTargetName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
