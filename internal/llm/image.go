package llm

import "strings"

// The rules of an image's source, which every front applies: an image has one of
// ImageMediaTypes and padded standard base64 data, or an http or https URL. Validate checks them
// on a request whatever made it (a binary body, a stored conversation, a caller of the Go
// library); the decoders check them where they read the fields, with these functions, to name
// the field and word the error as their format does, and ValidateDecoded then trusts them (see
// there). A URL of another scheme (file:, gopher:, ftp:) must never reach an engine that
// fetches what it is given.

// ImageMediaTypes are the media types an image may have, as the Anthropic API lists them (and
// OpenAI's takes the same four).
const ImageMediaTypes = "image/jpeg, image/png, image/gif, image/webp"

// ImageMediaType reports whether t is one of ImageMediaTypes.
func ImageMediaType(t string) bool {
	switch t {
	case "image/jpeg", "image/png", "image/gif", "image/webp":
		return true
	}
	return false
}

// ImageBase64 reports whether s is non-empty, padded standard base64 (RFC 4648 section 4, no
// line breaks): what the Anthropic API takes as an image's data.
func ImageBase64(s string) bool {
	if s == "" || len(s)%4 != 0 {
		return false
	}
	pad := 0
	if s[len(s)-1] == '=' {
		pad++
		if s[len(s)-2] == '=' {
			pad++
		}
	}
	for i := 0; i < len(s)-pad; i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/') {
			return false
		}
	}
	return true
}

// ImageURL reports whether u is an http or https URL (by its scheme, in lower case as the
// Anthropic API takes it); the host is the engine's to fetch.
func ImageURL(u string) bool {
	return strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://")
}
