package layer0_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/typeset"
)

// configTypes are the root's aliases of the configuration's types.
var configTypes = []reflect.Type{
	reflect.TypeFor[layer0.Config](), reflect.TypeFor[layer0.Server](), reflect.TypeFor[layer0.TLS](),
	reflect.TypeFor[layer0.EngineConfig](), reflect.TypeFor[layer0.Timeouts](), reflect.TypeFor[layer0.Sim](),
	reflect.TypeFor[layer0.SimFail](), reflect.TypeFor[layer0.Model](), reflect.TypeFor[layer0.Auth](),
	reflect.TypeFor[layer0.Log](), reflect.TypeFor[layer0.Key](), reflect.TypeFor[layer0.Rates](),
	reflect.TypeFor[layer0.Limits](), reflect.TypeFor[layer0.Split](), reflect.TypeFor[layer0.SplitTarget](),
	reflect.TypeFor[layer0.Routing](), reflect.TypeFor[layer0.RetryBudget](), reflect.TypeFor[layer0.Ejection](),
	reflect.TypeFor[layer0.Breaker](), reflect.TypeFor[layer0.Health](), reflect.TypeFor[layer0.AccessLog](),
	reflect.TypeFor[layer0.Debug](), reflect.TypeFor[layer0.Cache](), reflect.TypeFor[layer0.Context](),
	reflect.TypeFor[layer0.PrefixCache](), reflect.TypeFor[layer0.PrefixRouting](), reflect.TypeFor[layer0.PrefixSpread](),
	reflect.TypeFor[layer0.StickyRouting](), reflect.TypeFor[layer0.OffloadTarget](),
	reflect.TypeFor[layer0.Store](), reflect.TypeFor[layer0.StoreCache](), reflect.TypeFor[layer0.CORS](),
	reflect.TypeFor[layer0.Telemetry](), reflect.TypeFor[layer0.OTLP](), reflect.TypeFor[layer0.Responses](),
	reflect.TypeFor[layer0.Secret](), reflect.TypeFor[layer0.Price](), reflect.TypeFor[layer0.ModelPrice](),
	reflect.TypeFor[layer0.Budget](), reflect.TypeFor[layer0.Team](), reflect.TypeFor[layer0.Spend](),
	reflect.TypeFor[layer0.Money](),
	reflect.TypeFor[layer0.Admission](), reflect.TypeFor[layer0.AdmissionBand](), reflect.TypeFor[layer0.ModelRouting](),
}

// Every type a field of Config reaches, however deep (through pointers, slices and maps), has
// a root alias, so an application can write any section of a configuration as a literal; and
// every alias is of such a type.
func TestConfigTypesReExported(t *testing.T) {
	reached := typeset.Reached("github.com/layer0ai/layer0/", nil, reflect.TypeFor[layer0.Config]())
	unaliased, unreached := typeset.Missing(reached, configTypes)
	for _, ty := range unreached {
		t.Errorf("layer0 re-exports %v, which no field of Config reaches", ty)
	}
	for _, ty := range unaliased {
		t.Errorf("a field of Config reaches %v, which the root does not re-export (config.go)", ty)
	}
	if len(reached) < 30 {
		t.Errorf("the walk reached %d types, fewer than the configuration has", len(reached))
	}
}

// Every string constant of the configuration package that names a value of an enumerated field
// (an engine kind, a picker, a store kind…) is re-exported by the root's config.go; defaults and
// bounds (Default…, Max…) are left to the documentation.
func TestConfigConstantsReExported(t *testing.T) {
	fset := token.NewFileSet()
	root, err := parser.ParseFile(fset, "config.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	ast.Inspect(root, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "config" {
				exported[sel.Sel.Name] = true
			}
		}
		return true
	})
	files, _ := filepath.Glob("internal/config/*.go")
	var want int
	for _, p := range files {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !name.IsExported() || !ok || lit.Kind != token.STRING ||
						strings.HasPrefix(name.Name, "Default") || name.Name == "Redacted" {
						continue
					}
					want++
					if !exported[name.Name] {
						t.Errorf("config.%s (%s) is not re-exported by the root's config.go", name.Name, lit.Value)
					}
				}
			}
		}
	}
	if want < 20 {
		t.Errorf("found %d enumerated values in internal/config, fewer than it has", want)
	}
}
