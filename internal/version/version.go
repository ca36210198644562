// Package version says which build of layer0 is running, from the build information the Go
// toolchain embeds (runtime/debug.ReadBuildInfo): the module version, the VCS commit and its
// time, and the Go version. `layer0 version` prints it and the layer0_build_info metric carries
// it.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
)

// buildTime is the build's time when the build sets it:
// go build -ldflags "-X github.com/layer0ai/layer0/internal/version.buildTime=$(date -u +%Y-%m-%dT%H:%M:%SZ)".
// The toolchain records no build time of its own.
var buildTime string

// Unknown stands for what the build did not record (a test binary has no VCS information).
const Unknown = "unknown"

// Info describes the running build.
type Info struct {
	// Version is the main module's version: a tag (v1.2.3), a pseudo-version, or "(devel)" for
	// a build from a working tree.
	Version string
	// Commit is the VCS revision the binary was built from.
	Commit string
	// CommitTime is the commit's time (RFC 3339).
	CommitTime string
	// Built is the build's time, when the build set it (see buildTime).
	Built string
	// Modified is set when the working tree had uncommitted changes.
	Modified bool
	// Go is the Go toolchain version.
	Go string
}

// Get returns the running build's Info; fields the build did not record are Unknown.
var Get = sync.OnceValue(func() Info {
	in := Info{Version: Unknown, Commit: Unknown, CommitTime: Unknown, Built: Unknown, Go: runtime.Version()}
	if buildTime != "" {
		in.Built = buildTime
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return in
	}
	if v := bi.Main.Version; v != "" {
		in.Version = v
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Commit = s.Value
		case "vcs.time":
			in.CommitTime = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
})

// String is what `layer0 version` prints: one field a line.
func (in Info) String() string {
	commit := in.Commit
	if in.Modified {
		commit += " (with uncommitted changes)"
	}
	return fmt.Sprintf("layer0 %s\ncommit:      %s\ncommit time: %s\nbuild time:  %s\ngo:          %s\n",
		in.Version, commit, in.CommitTime, in.Built, in.Go)
}
