package cache_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/layer0ai/layer0/internal/cache"
	"github.com/layer0ai/layer0/internal/llm"
)

// unkeyed are the fields of llm.Request (by path, nested fields after a dot) that are not in the
// key, with why: none of them can change what the engine answers.
var unkeyed = map[string]string{
	"Model":  "the key has the canonical model name (Encode's model), not the client's spelling",
	"Stream": "a streamed and a whole answer are the same events",
	"UserID": "metadata.user_id identifies the end user to the engine's abuse checks",
	"Format": "the client's format: every format replays the same events",
}

// uncacheable are the fields whose presence makes a request uncacheable (Policy.Cacheable).
var uncacheable = map[string]bool{"Ignored": true}

// TestKeyCoversRequest enumerates every field of the canonical request, nested ones included,
// by reflection: changing any of them changes the key, unless it is listed as unkeyed (it cannot
// change the answer) or uncacheable (a request carrying it is not cached). A field added to
// llm.Request fails here until the key covers it or it is listed, with its reason.
func TestKeyCoversRequest(t *testing.T) {
	base := func() *llm.Request {
		r := &llm.Request{}
		fill(reflect.ValueOf(r).Elem(), 0)
		for name := range uncacheable {
			f := reflect.ValueOf(r).Elem().FieldByName(name)
			f.SetZero()
		}
		return r
	}
	policy := cache.Policy{Sampled: true}
	if !policy.Cacheable(base()) {
		t.Fatal("the filled request is not cacheable")
	}
	want := cache.KeyOf("", "m", base())
	seen := map[string]bool{}
	var walk func(path, name string, get func(*llm.Request) reflect.Value, typ reflect.Type, depth int)
	check := func(path, name string, get func(*llm.Request) reflect.Value) {
		seen[name] = true
		r := base()
		change(get(r))
		switch {
		case uncacheable[name]:
			if policy.Cacheable(r) {
				t.Errorf("%s: set, the request is still cacheable", path)
			}
		case unkeyed[name] != "":
			if cache.KeyOf("", "m", r) != want {
				t.Errorf("%s: listed as not in the key, but it changes the key", path)
			}
		default:
			if cache.KeyOf("", "m", r) == want {
				t.Errorf("%s: changing it leaves the key as it was; put it in the key, or list it as unkeyed (why it cannot change the answer) or uncacheable", path)
			}
		}
	}
	walk = func(path, name string, get func(*llm.Request) reflect.Value, typ reflect.Type, depth int) {
		if path != "" {
			check(path, name, get)
		}
		switch typ.Kind() {
		case reflect.Struct:
			for i := range typ.NumField() {
				f := typ.Field(i)
				p, n := f.Name, f.Name
				if path != "" {
					p, n = path+"."+f.Name, name+"."+f.Name
				}
				walk(p, n, func(r *llm.Request) reflect.Value { return get(r).Field(i) }, f.Type, depth)
			}
		case reflect.Pointer:
			walk(path+"*", name, func(r *llm.Request) reflect.Value { return get(r).Elem() }, typ.Elem(), depth)
		case reflect.Slice:
			if typ.Elem().Kind() == reflect.Uint8 || depth > 1 { // a JSON value, or a slice fill left empty
				return
			}
			walk(path+"[0]", name, func(r *llm.Request) reflect.Value { return get(r).Index(0) }, typ.Elem(), depth+1)
		}
	}
	walk("", "", func(r *llm.Request) reflect.Value { return reflect.ValueOf(r).Elem() }, reflect.TypeOf(llm.Request{}), 0)
	for name := range unkeyed {
		if !seen[name] {
			t.Errorf("unkeyed lists %s, which llm.Request no longer has", name)
		}
	}
	for name := range uncacheable {
		if !seen[name] {
			t.Errorf("uncacheable lists %s, which llm.Request no longer has", name)
		}
	}
}

// fill sets every field of v to a value other than its zero, one element in each slice (blocks
// nested in blocks one level deep); a json.RawMessage holds an object.
func fill(v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(2)
	case reflect.Uint8:
		v.SetUint(2) // enums: 2 is a schema for a response format, so its fields count
	case reflect.Float64:
		v.SetFloat(0.5)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), depth)
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i), depth)
		}
	case reflect.Slice:
		if v.Type() == reflect.TypeOf(json.RawMessage(nil)) {
			v.SetBytes([]byte(`{"a":1}`))
			return
		}
		if depth > 1 {
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0), depth+1)
	default:
		panic("fill: no value for " + v.Type().String())
	}
}

// change sets v to another value than fill gave it (or gives a field left empty a value).
func change(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "y")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Uint8:
		v.SetUint(v.Uint() ^ 1)
	case reflect.Float64:
		v.SetFloat(v.Float() + 0.25)
	case reflect.Pointer:
		v.SetZero()
	case reflect.Struct:
		change(v.Field(0))
	case reflect.Slice:
		switch {
		case v.Type() == reflect.TypeOf(json.RawMessage(nil)):
			v.SetBytes([]byte(`{"a":2}`))
		case v.Len() == 0:
			v.Set(reflect.MakeSlice(v.Type(), 1, 1))
			fill(v.Index(0), 2)
		default:
			v.SetZero()
		}
	default:
		panic("change: no value for " + v.Type().String())
	}
}
