// The YAML helpers of decoding: sections given no value, and the paths of nodes named in errors.

package config

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// bareSections returns the top-level keys of the YAML document b given no value ("models:" and
// nothing under it): what a file cut short at a line's end looks like, which would otherwise
// load as that section's default (the embedded sim model, for engines and models).
func bareSections(b []byte) []string {
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil || len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return nil
	}
	var bare []string
	m := root.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if v := m.Content[i+1]; v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			bare = append(bare, m.Content[i].Value)
		}
	}
	return bare
}

// empty reports whether the YAML document b has no settings: nothing, or only comments, or a
// null document. Invalid YAML is not empty: Parse reports it.
func empty(b []byte) bool {
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return false
	}
	if len(root.Content) == 0 {
		return true
	}
	n := root.Content[0]
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// nodePaths records, for each line of the document, the dotted path of the last key or item on
// it, so the YAML library's "line N: …" type errors can name the field.
func nodePaths(n *yaml.Node, path string, out map[int]string) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			out[k.Line] = p
			nodePaths(v, p, out)
		}
	case yaml.SequenceNode:
		for i, v := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			if v.Kind == yaml.ScalarNode {
				out[v.Line] = p
			}
			nodePaths(v, p, out)
		}
	}
}

// withPath rewrites "line N: msg" as "PATH (line N): msg" when the line's path is known.
func withPath(msg string, paths map[int]string) string {
	var line int
	if _, err := fmt.Sscanf(msg, "line %d:", &line); err != nil {
		return msg
	}
	p, ok := paths[line]
	if !ok {
		return msg
	}
	rest := strings.TrimSpace(msg[strings.Index(msg, ":")+1:])
	return fmt.Sprintf("%s (line %d): %s", p, line, rest)
}

// setDefault sets *p to v when it is the zero value, and writes nothing otherwise: defaulting a
// configuration that is already defaulted (one a running gateway reads, reloaded as it is)
// changes no memory another goroutine may be reading.
func setDefault[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}
