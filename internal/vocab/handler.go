package vocab

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Paths the Handler serves. The server routes both to it.
const (
	// Path redirects (302) to the current vocabulary's immutable URL.
	Path = "/v1/binary/vocab"
	// PathPrefix + hash is the immutable URL of one vocabulary.
	PathPrefix = Path + "/"
	// HashHeader is the response header naming, by hash, the vocabulary a binary stream's token
	// IDs index (sent with every binary response, and by the Handler).
	HashHeader = "X-Binary-Vocab"
	// ContentType is the media type of the serialized vocabulary.
	ContentType = "application/x-layer0-vocab"
)

// Handler serves the vocabulary:
//
//	GET /v1/binary/vocab         302 to /v1/binary/vocab/{hash}, not cached
//	GET /v1/binary/vocab/{hash}  200 with the serialized form; ETag "{hash}", Cache-Control
//	                             immutable for a year; gzip when the client accepts it;
//	                             If-None-Match answered 304; any other hash 404
//
// HEAD is served like GET without a body; other methods get 405. The zero value is not usable;
// get one from Vocab.Handler.
type Handler struct {
	v *Vocab

	gzOnce sync.Once
	gz     []byte // the serialized form gzipped, built on first use
}

// Handler returns an http.Handler serving v at Path and PathPrefix.
func (v *Vocab) Handler() *Handler { return &Handler{v: v} }

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "vocab: method not allowed", http.StatusMethodNotAllowed)
		return
	}
	hash := h.v.Hash()
	w.Header().Set(HashHeader, hash)
	switch p := strings.TrimSuffix(r.URL.Path, "/"); {
	case p == Path:
		w.Header().Set("Cache-Control", "no-cache")
		http.Redirect(w, r, PathPrefix+hash, http.StatusFound)
		return
	case p != PathPrefix+hash:
		w.Header().Set("Cache-Control", "no-cache")
		http.Error(w, "vocab: unknown vocabulary "+strings.TrimPrefix(p, PathPrefix)+
			"; the current one is "+PathPrefix+hash, http.StatusNotFound)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", ContentType)
	hd.Set("Cache-Control", "public, max-age=31536000, immutable")
	hd.Add("Vary", "Accept-Encoding") // added: a CORS answer already varies by Origin
	body, etag := h.v.raw, `"`+hash+`"`
	if acceptsGzip(r.Header.Get("Accept-Encoding")) {
		h.gzOnce.Do(h.compress)
		body, etag = h.gz, `"`+hash+`-gz"`
		hd.Set("Content-Encoding", "gzip")
	}
	hd.Set("ETag", etag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
}

func (h *Handler) compress() {
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression) // the level is valid
	zw.Write(h.v.raw)                                      // a bytes.Buffer does not fail
	zw.Close()
	h.gz = b.Bytes()
}

// acceptsGzip reports whether an Accept-Encoding value lists gzip with a non-zero quality.
func acceptsGzip(ae string) bool {
	for part := range strings.SplitSeq(ae, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(name), "gzip") {
			continue
		}
		q := strings.ReplaceAll(params, " ", "")
		return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
	}
	return false
}
