// Package web holds layer0's browser side, embedded in the binary: the binary protocol's
// JavaScript client (layer0.js) and the playground, one static page with its script and style
// that compares the transports side by side. Nothing here is built: the files are served as
// they are.
package web

import (
	"embed"
	"fmt"
)

//go:embed layer0.js playground.html playground.js playground.css
var files embed.FS

// Asset is one file of the playground as served.
type Asset struct {
	// Name is the file's name ("playground.js").
	Name string
	// Body is the file's content.
	Body []byte
	// ContentType is its media type.
	ContentType string
}

// Playground returns the playground's files: the page first, then its script, its style and
// the binary protocol's client it imports.
func Playground() []Asset {
	out := make([]Asset, 0, 4)
	for _, f := range []struct{ name, ctype string }{
		{"playground.html", "text/html; charset=utf-8"},
		{"playground.js", "text/javascript; charset=utf-8"},
		{"playground.css", "text/css; charset=utf-8"},
		{"layer0.js", "text/javascript; charset=utf-8"},
	} {
		b, err := files.ReadFile(f.name)
		if err != nil {
			panic(fmt.Sprintf("web: %s is not embedded: %v", f.name, err)) // a build that lost a file
		}
		out = append(out, Asset{Name: f.name, Body: b, ContentType: f.ctype})
	}
	return out
}
