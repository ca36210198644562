package server

import (
	"net/http"
	"strings"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/web"
)

// playgroundPrefix is where the playground's page and files are served.
const playgroundPrefix = "/playground"

// playgroundCSP keeps the page to this origin: no script, style, font or request elsewhere.
const playgroundCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// playgroundFiles are the playground's assets by path: the page at /playground and
// /playground/, its files at /playground/NAME.
var playgroundFiles = func() map[string]web.Asset {
	m := map[string]web.Asset{}
	for i, a := range web.Playground() {
		if i == 0 {
			m[playgroundPrefix], m[playgroundPrefix+"/"] = a, a
			continue
		}
		m[playgroundPrefix+"/"+a.Name] = a
	}
	return m
}()

func isPlaygroundPath(path string) bool {
	return path == playgroundPrefix || strings.HasPrefix(path, playgroundPrefix+"/")
}

// playground serves the playground's page and files, and redirects / to the page.
func (x *exchange) playground() {
	h := x.w.Header()
	path := x.r.URL.Path
	if path == "/" {
		h.Set("Location", playgroundPrefix)
		x.writeFull(http.StatusFound, "text/html; charset=utf-8", []byte(`<a href="/playground">playground</a>`+"\n"))
		return
	}
	a, ok := playgroundFiles[path]
	if !ok {
		x.fail(&apierr.Error{Kind: apierr.NotFound, Code: "not_found", Message: "GET " + sanitize(path) + ": no such file of the playground"})
		return
	}
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", playgroundCSP)
	h.Set("Referrer-Policy", "no-referrer")
	x.writeFull(http.StatusOK, a.ContentType, a.Body)
}
