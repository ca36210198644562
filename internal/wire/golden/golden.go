// Package golden holds the recorded answers of the request decoders for tests: a file of
// request bodies, each with the canonical text of what decoding it gave (the request, or the
// error a client gets). A decoder rewritten for speed is held to the answers of the one it
// replaced, byte for byte, over bodies that reach every branch: valid requests and requests with
// wrong types, repeated names, names in another case, bad UTF-8 and broken syntax. It also
// holds the stream readers' shared check that the text they hand a Sink outlives their buffer
// (CheckKeptText).
package golden

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/layer0ai/layer0/internal/apierr"
)

var update = flag.Bool("update-golden", false, "rewrite the recorded answers of the golden files from the decoders as they are")

// Check decodes every body of the file at path with decode, which returns the decoded values
// (or the error), and compares their canonical text with the recorded one; with
// -update-golden it records them instead.
func Check(t *testing.T, path string, decode func(body []byte) (any, error)) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<24)
	var body []byte
	n, bad := 0, 0
	for sc.Scan() {
		line := sc.Text()
		kind, quoted, _ := strings.Cut(line, " ")
		s, err := strconv.Unquote(quoted)
		if err != nil {
			t.Fatalf("%s: %q: %v", path, line, err)
		}
		switch kind {
		case "in":
			body = []byte(s)
			fmt.Fprintf(&out, "in %s\n", quoted)
		case "out":
			n++
			got := Canon(decode(bytes.Clone(body)))
			fmt.Fprintf(&out, "out %s\n", strconv.Quote(got))
			if !*update && got != s {
				if bad++; bad <= 20 {
					t.Errorf("%q:\n got %s\nwant %s", body, got, s)
				}
			}
		}
	}
	if *update {
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if bad > 0 {
		t.Errorf("%d of %d bodies decode otherwise than recorded", bad, n)
	}
}

// Canon is the canonical text of a decoder's answer: the error a client gets (kind, param,
// code and message), or every field of the values, pointers followed and JSON kept as text.
func Canon(v any, err error) string {
	if err != nil {
		var e *apierr.Error
		if !errors.As(err, &e) {
			return "error " + err.Error()
		}
		return fmt.Sprintf("error %v param=%q code=%q: %s", e.Kind, e.Param, e.Code, e.Message)
	}
	var b strings.Builder
	canon(&b, reflect.ValueOf(v))
	return b.String()
}

func canon(b *strings.Builder, v reflect.Value) {
	switch v.Kind() {
	case reflect.Invalid:
		b.WriteString("nil")
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			b.WriteString("nil")
			return
		}
		canon(b, v.Elem())
	case reflect.Struct:
		b.WriteString(v.Type().Name() + "{")
		for i := range v.NumField() {
			if f := v.Field(i); !f.IsZero() {
				b.WriteString(v.Type().Field(i).Name + ":")
				canon(b, f)
				b.WriteByte(' ')
			}
		}
		b.WriteByte('}')
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			b.WriteString(strconv.Quote(string(v.Bytes())))
			return
		}
		fallthrough
	case reflect.Array:
		b.WriteByte('[')
		for i := range v.Len() {
			canon(b, v.Index(i))
			b.WriteByte(' ')
		}
		b.WriteByte(']')
	case reflect.Map:
		keys := v.MapKeys()
		strs := make([]string, len(keys))
		for i, k := range keys {
			var kb strings.Builder
			canon(&kb, k)
			var vb strings.Builder
			canon(&vb, v.MapIndex(k))
			strs[i] = kb.String() + ":" + vb.String()
		}
		slices.Sort(strs)
		b.WriteString("map[" + strings.Join(strs, " ") + "]")
	case reflect.String:
		b.WriteString(strconv.Quote(v.String()))
	default:
		fmt.Fprintf(b, "%v", v)
	}
}
