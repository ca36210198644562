package vocab

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestHandler(t *testing.T) {
	v := Default()
	h := v.Handler()
	cur := PathPrefix + v.Hash()
	tests := []struct {
		name       string
		method     string
		path       string
		header     map[string]string
		wantStatus int
		wantHeader map[string]string
		wantBody   []byte // checked when non-nil (after gunzip when Content-Encoding is gzip)
	}{
		{
			name: "redirect to current hash", method: "GET", path: Path,
			wantStatus: http.StatusFound,
			wantHeader: map[string]string{"Location": cur, "Cache-Control": "no-cache", HashHeader: v.Hash()},
		},
		{
			name: "redirect with trailing slash", method: "GET", path: Path + "/",
			wantStatus: http.StatusFound, wantHeader: map[string]string{"Location": cur},
		},
		{
			name: "immutable table", method: "GET", path: cur,
			wantStatus: http.StatusOK,
			wantHeader: map[string]string{
				"Content-Type":  ContentType,
				"Cache-Control": "public, max-age=31536000, immutable",
				"ETag":          `"` + v.Hash() + `"`,
				"Vary":          "Accept-Encoding",
			},
			wantBody: v.raw,
		},
		{
			name: "gzip", method: "GET", path: cur, header: map[string]string{"Accept-Encoding": "br, gzip"},
			wantStatus: http.StatusOK,
			wantHeader: map[string]string{"Content-Encoding": "gzip", "ETag": `"` + v.Hash() + `-gz"`},
			wantBody:   v.raw,
		},
		{
			name: "gzip refused with q=0", method: "GET", path: cur, header: map[string]string{"Accept-Encoding": "gzip;q=0"},
			wantStatus: http.StatusOK, wantHeader: map[string]string{"Content-Encoding": ""}, wantBody: v.raw,
		},
		{
			name: "not modified", method: "GET", path: cur, header: map[string]string{"If-None-Match": `"` + v.Hash() + `"`},
			wantStatus: http.StatusNotModified,
		},
		{
			name: "head", method: "HEAD", path: cur, wantStatus: http.StatusOK, wantBody: []byte{},
		},
		{
			name: "unknown hash", method: "GET", path: PathPrefix + "0000000000000000",
			wantStatus: http.StatusNotFound,
		},
		{
			name: "post", method: "POST", path: cur, wantStatus: http.StatusMethodNotAllowed,
			wantHeader: map[string]string{"Allow": "GET, HEAD"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.path, nil)
			for k, val := range tc.header {
				r.Header.Set(k, val)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.wantStatus {
				t.Fatalf("status = %d, want %d (body %q)", w.Code, tc.wantStatus, w.Body.String())
			}
			for k, want := range tc.wantHeader {
				if got := w.Header().Get(k); got != want {
					t.Errorf("header %s = %q, want %q", k, got, want)
				}
			}
			if tc.wantBody == nil {
				return
			}
			body := w.Body.Bytes()
			if w.Header().Get("Content-Encoding") == "gzip" {
				zr, err := gzip.NewReader(bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				if body, err = io.ReadAll(zr); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(body, tc.wantBody) {
				t.Errorf("body: got %d bytes, want %d", len(body), len(tc.wantBody))
			}
		})
	}
}
