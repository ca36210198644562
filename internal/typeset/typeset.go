// Package typeset finds the named types a type reaches through its fields, for the tests that
// hold a package's re-exports to the types its API exposes.
package typeset

import (
	"reflect"
	"strings"
)

// Reached returns the named types of packages under prefix that roots reach, themselves
// included: through struct fields (exported ones, and only those keep reports), pointers,
// slices, arrays and maps, however deep.
func Reached(prefix string, keep func(reflect.StructField) bool, roots ...reflect.Type) map[reflect.Type]bool {
	reached := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(ty reflect.Type) {
		switch ty.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array:
			walk(ty.Elem())
			return
		case reflect.Map:
			walk(ty.Key())
			walk(ty.Elem())
			return
		}
		if ty.Name() == "" || !strings.HasPrefix(ty.PkgPath(), prefix) || reached[ty] {
			return
		}
		reached[ty] = true
		if ty.Kind() == reflect.Struct {
			for f := range ty.Fields() {
				if f.IsExported() && (keep == nil || keep(f)) {
					walk(f.Type)
				}
			}
		}
	}
	for _, ty := range roots {
		walk(ty)
	}
	return reached
}

// Missing compares the aliases a package declares with the types reached: it returns the
// reached types without an alias and the aliases of types not reached.
func Missing(reached map[reflect.Type]bool, aliases []reflect.Type) (unaliased, unreached []reflect.Type) {
	aliased := map[reflect.Type]bool{}
	for _, ty := range aliases {
		aliased[ty] = true
		if !reached[ty] {
			unreached = append(unreached, ty)
		}
	}
	for ty := range reached {
		if !aliased[ty] {
			unaliased = append(unaliased, ty)
		}
	}
	return unaliased, unreached
}
