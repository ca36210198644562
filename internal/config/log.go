package config

import (
	"strings"
)

// Log configures logging.
type Log struct {
	// Level is debug, info, warn or error. Default info.
	Level string `yaml:"level"`
	// Access enables the access log, one record per request. Default true.
	Access *bool `yaml:"access"`
	// AccessLog says where the access log goes and how it is written.
	AccessLog AccessLog `yaml:"access_log"`
}

// Access log formats.
const (
	AccessJSON = "json"
	AccessText = "text"
)

// AccessLog says where the access log goes and how it is written.
type AccessLog struct {
	// Path is the file the records are appended to, reopened on SIGUSR1 (for logrotate).
	// Default "" (stderr).
	Path string `yaml:"path"`
	// Format is json (one JSON object a line) or text (key=value pairs). Default json.
	Format string `yaml:"format"`
	// Scrapes logs the operator's requests too: /healthz, /readyz and /metrics. Default false.
	Scrapes bool `yaml:"scrapes"`
}

// Debug configures the decision traces: what each stage decided for the last requests.
type Debug struct {
	// Requests is how many of the last requests keep their trace, looked up on the admin
	// listener at /debug/requests. 0 keeps none. Read at start; a reload does not resize it.
	// Default 0 in a file, DefaultDebugRequests in the embedded default; at most MaxDebugRequests.
	Requests int `yaml:"requests"`
}

// DefaultDebugRequests is debug.requests of the embedded default (no file): on loopback without
// keys, traces simply work, for `layer0 debug` and the playground. A file keeps none unless it
// says so.
const DefaultDebugRequests = 100

// MaxDebugRequests bounds debug.requests (a trace is about 1 KiB).
const MaxDebugRequests = 1 << 20

// validate checks the log level and the access log's format and path.
func (l *Log) validate(errs *Errors) {
	switch l.Level {
	case "debug", "info", "warn", "error":
	default:
		errs.add("log.level", "unknown level %q (want debug, info, warn or error)", l.Level)
	}
	switch l.AccessLog.Format {
	case AccessJSON, AccessText:
	default:
		errs.add("log.access_log.format", "unknown format %q (want json or text)", l.AccessLog.Format)
	}
	if p := l.AccessLog.Path; p != "" && strings.HasSuffix(p, "/") {
		errs.add("log.access_log.path", "%q names a directory, want a file", p)
	}
}

// setDefaults fills the unset fields with their defaults: level info, the access log on, in
// JSON.
func (l *Log) setDefaults() {
	setDefault(&l.Level, "info")
	if l.Access == nil {
		t := true
		l.Access = &t
	}
	setDefault(&l.AccessLog.Format, AccessJSON)
}
