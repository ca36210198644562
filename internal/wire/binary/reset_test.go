package binary

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDecoderReset decodes a version-1 stream, then a version-2 stream on the same decoder.
func TestDecoderReset(t *testing.T) {
	v1 := []byte("ANTH\x00\x00\x02\x00\x07\x03\x00\x00")
	v2 := []byte("ANTH\x02\x00\x01\x07\x03\x00")
	types := func(d *Decoder, stream []byte) []FrameType {
		t.Helper()
		_, _ = d.Write(stream)
		var got []FrameType
		for {
			f, ok, err := d.Next()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return got
			}
			got = append(got, f.Type)
		}
	}
	d := NewDecoder(V1)
	want := []FrameType{FrameToken, FrameDone}
	if diff := cmp.Diff(want, types(d, v1)); diff != "" {
		t.Errorf("version 1 (-want +got):\n%s", diff)
	}
	d.Reset(V2)
	if diff := cmp.Diff(want, types(d, v2)); diff != "" {
		t.Errorf("version 2 after Reset (-want +got):\n%s", diff)
	}
	allocs := testing.AllocsPerRun(100, func() {
		d.Reset(V1)
		_, _ = d.Write(v1)
		for {
			if _, ok, err := d.Next(); !ok || err != nil {
				return
			}
		}
	})
	if allocs != 0 {
		t.Errorf("Reset and decode: got %v allocs, want 0", allocs)
	}
}
