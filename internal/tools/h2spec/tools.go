//go:build tools

// Package h2spec pins the HTTP/2 conformance tool h2spec, which the conformance test in
// internal/server builds from this module (kept apart so that its dependencies stay out of
// layer0's own go.mod).
package h2spec

import _ "github.com/summerwind/h2spec/cmd/h2spec"
