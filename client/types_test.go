package client_test

import (
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/layer0ai/layer0/client"
	"github.com/layer0ai/layer0/internal/typeset"
)

// clientTypes are the client's aliases of the canonical types.
var clientTypes = []reflect.Type{
	reflect.TypeFor[client.Request](), reflect.TypeFor[client.Message](), reflect.TypeFor[client.Block](),
	reflect.TypeFor[client.Event](), reflect.TypeFor[client.Response](), reflect.TypeFor[client.Role](),
	reflect.TypeFor[client.BlockType](), reflect.TypeFor[client.EventKind](), reflect.TypeFor[client.StopReason](),
	reflect.TypeFor[client.Usage](), reflect.TypeFor[client.Tool](), reflect.TypeFor[client.ToolChoice](),
	reflect.TypeFor[client.ToolChoiceType](), reflect.TypeFor[client.ResponseFormat](),
	reflect.TypeFor[client.ResponseFormatType](), reflect.TypeFor[client.ErrorKind](),
}

// Every type a field of a request, a response or an event reaches has a client alias, so that a
// program writes any part of a request, and reads any part of an answer, with this package's
// names. Request.Format is left out: a Client's Protocol says the wire format.
func TestClientTypesReExported(t *testing.T) {
	format := func(f reflect.StructField) bool { return f.Name != "Format" } // Request.Format
	reached := typeset.Reached("github.com/layer0ai/layer0/", format, reflect.TypeFor[client.Request](),
		reflect.TypeFor[client.Response](), reflect.TypeFor[client.Event](), reflect.TypeFor[client.Error]())
	unaliased, unreached := typeset.Missing(reached, append(clientTypes, reflect.TypeFor[client.Error]()))
	for _, ty := range unreached {
		t.Errorf("client re-exports %v, which no request, response or event reaches", ty)
	}
	for _, ty := range unaliased {
		t.Errorf("a request, response or event reaches %v, which package client does not re-export (types.go)", ty)
	}
}

// A program that links the client links none of the gateway: only the canonical types, the
// error type, the wire formats and the HTTP/3 transport.
func TestClientLinksNoGateway(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	allowed := []string{"internal/apierr", "internal/llm", "internal/h3", "internal/vocab", "internal/wire/"}
	var ours int
	for _, pkg := range strings.Fields(string(out)) {
		rest, ok := strings.CutPrefix(pkg, "github.com/layer0ai/layer0")
		if !ok || rest == "/client" {
			continue
		}
		ours++
		if !slicesContainsPrefix(allowed, strings.TrimPrefix(rest, "/")) {
			t.Errorf("package client depends on %s", pkg)
		}
	}
	if ours == 0 {
		t.Errorf("go list -deps named none of layer0's packages:\n%s", out)
	}
}

func slicesContainsPrefix(prefixes []string, s string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
