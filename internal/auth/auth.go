// Package auth authenticates API keys and checks which models a key may use. Keys are declared
// only as SHA-256 hashes: a presented key is hashed and looked up in a map by its hash, so the
// process never holds a secret it could leak, by timing or otherwise (see Keys.Authenticate).
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/limit"
)

// Prefix starts every key NewKey makes, so a leaked key is recognisable (secret scanners) and
// never mistaken for another provider's.
const Prefix = "l0-"

// keyDigits is the length of the base62 part of a key: 32 random bytes need 43 digits
// (62^43 > 2^256).
const keyDigits = 43

// Spec declares one API key, as the configuration file does.
type Spec struct {
	// Name identifies the key in logs and metrics, never the secret. Required, unique.
	Name string
	// Hash is the hex SHA-256 of the key (as `layer0 keys new` prints it). Required, unique.
	Hash string
	// Models lists the model names the key may use; "*" in a name matches any run of
	// characters ("claude-*"). Empty means every model.
	Models []string
	// Limits are the key's own rate limits. Default none.
	Limits limit.Limits
	// Debug lets the key ask for decision traces.
	Debug bool
	// Admin lets the key read every key's decision traces; it implies Debug.
	Admin bool
}

// Key is an authenticated caller.
type Key struct {
	// Name identifies the key in logs, metrics and limits.
	Name string
	// Hash is the SHA-256 of the secret.
	Hash [32]byte
	// Models are the model name patterns the key may use; empty means all.
	Models []string
	// Limits are the key's rate limits, for the limit.Limiter built beside the key set.
	Limits limit.Limits
	// Debug lets the key ask for decision traces (X-Layer0-Debug: 1) and read its own
	// requests' traces.
	Debug bool
	// Admin lets the key read every key's decision traces, not only its own.
	Admin bool
}

// Keys is an immutable set of API keys, safe for concurrent use. A nil or empty set has no keys:
// the caller then serves without auth, and only on loopback (CheckListen).
type Keys struct {
	byHash map[[32]byte]*Key
	list   []*Key // sorted by name
}

// New validates specs and builds the key set. Its error lists every problem, each prefixed by
// the spec's index (keys[2].hash: …).
func New(specs []Spec) (*Keys, error) {
	k := &Keys{byHash: make(map[[32]byte]*Key, len(specs))}
	names := map[string]int{}
	var errs []error
	bad := func(i int, field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("auth: keys[%d].%s: %s", i, field, fmt.Sprintf(format, args...)))
	}
	for i, s := range specs {
		if s.Name == "" {
			bad(i, "name", "required")
		} else if j, dup := names[s.Name]; dup {
			bad(i, "name", "%q is also the name of keys[%d]", s.Name, j)
		} else {
			names[s.Name] = i
		}
		h, err := ParseHash(s.Hash)
		if err != nil {
			bad(i, "hash", "%v", err)
		} else if other, dup := k.byHash[h]; dup {
			bad(i, "hash", "same key as %q", other.Name)
		}
		for j, m := range s.Models {
			if m == "" {
				bad(i, fmt.Sprintf("models[%d]", j), "empty model name")
			}
		}
		if err != nil || s.Name == "" {
			continue
		}
		key := &Key{Name: s.Name, Hash: h, Models: append([]string(nil), s.Models...), Limits: s.Limits,
			Debug: s.Debug || s.Admin, Admin: s.Admin}
		if _, dup := k.byHash[h]; !dup {
			k.byHash[h] = key
			k.list = append(k.list, key)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	sort.Slice(k.list, func(i, j int) bool { return k.list[i].Name < k.list[j].Name })
	return k, nil
}

// ParseHash decodes a hex SHA-256 (64 hex digits, either case).
func ParseHash(s string) ([32]byte, error) {
	var h [32]byte
	if len(s) != 64 {
		return h, fmt.Errorf("want 64 hex digits (a SHA-256), got %d characters", len(s))
	}
	if _, err := hex.Decode(h[:], []byte(s)); err != nil {
		return h, errors.New("not hexadecimal")
	}
	return h, nil
}

// HashHex returns the hex SHA-256 of key, the form the configuration declares.
func HashHex(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

// NewKey returns a fresh API key — Prefix and 43 base62 digits of 32 random bytes — and its hex
// SHA-256 for the configuration. The key is shown once; only the hash is stored.
func NewKey() (key, hashHex string) {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (it crashes the program instead)
	digits := new(big.Int).SetBytes(b[:]).Text(62)
	key = Prefix + strings.Repeat("0", keyDigits-len(digits)) + digits
	return key, HashHex(key)
}

// Len is the number of keys.
func (k *Keys) Len() int {
	if k == nil {
		return 0
	}
	return len(k.list)
}

// All returns the keys sorted by name. The slice must not be modified.
func (k *Keys) All() []*Key {
	if k == nil {
		return nil
	}
	return k.list
}

// Limits returns each key's limits by name, the form limit.Config.Keys takes.
func (k *Keys) Limits() map[string]limit.Limits {
	m := make(map[string]limit.Limits, k.Len())
	for _, key := range k.All() {
		m[key.Name] = key.Limits
	}
	return m
}

// authError returns a fresh 401 (callers may add headers to it). Messages never include what
// the client sent.
func authError(code, msg string) *apierr.Error {
	return &apierr.Error{Kind: apierr.Authentication, Code: code, Message: msg}
}

const (
	msgMissing   = "missing API key: send it in the x-api-key header or as Authorization: Bearer KEY"
	msgScheme    = "unsupported Authorization scheme: send the API key as Authorization: Bearer KEY or in the x-api-key header"
	msgInvalid   = "invalid API key"
	msgAmbiguous = "the x-api-key or Authorization header is sent more than once with different values: send one key"
)

// single reports whether a header's values (none, one, or copies of one) name one credential.
func single(vs []string) bool {
	for _, v := range vs[min(len(vs), 1):] {
		if v != vs[0] {
			return false
		}
	}
	return true
}

// Authenticate finds the key presented in h: the x-api-key header, or else Authorization:
// Bearer. It returns a 401 *apierr.Error saying whether the key is missing or invalid, never
// echoing it.
//
// Timing: the presented key is hashed and the hash is looked up in a map. Whatever the lookup's
// timing reveals is about SHA-256 of the attacker's own input compared with stored hashes;
// turning that into a key would need a SHA-256 preimage, so no constant-time comparison is
// needed, and none of a stored secret exists to compare.
//
// A header sent more than once is refused (401) unless every copy is the same: a proxy that
// reads another copy than layer0 does would otherwise authorise another principal.
func (k *Keys) Authenticate(h http.Header) (*Key, error) {
	if !single(h["X-Api-Key"]) || !single(h["Authorization"]) {
		return nil, authError("AMBIGUOUS_API_KEY", msgAmbiguous)
	}
	secret := h.Get("X-Api-Key")
	if secret == "" {
		a := h.Get("Authorization")
		if a == "" {
			return nil, authError("MISSING_API_KEY", msgMissing)
		}
		scheme, rest, _ := strings.Cut(a, " ")
		if !strings.EqualFold(scheme, "Bearer") {
			return nil, authError("MISSING_API_KEY", msgScheme)
		}
		secret = strings.TrimSpace(rest)
		if secret == "" {
			return nil, authError("MISSING_API_KEY", msgMissing)
		}
	}
	if k != nil {
		if key, ok := k.byHash[hashOf(secret)]; ok {
			return key, nil
		}
	}
	return nil, authError("INVALID_API_KEY", msgInvalid)
}

// Allow returns nil if the key may use model, else a 403 *apierr.Error naming the model. Pass the
// model name as the routing table resolved it, so spellings (binary clients drop dashes) do not
// matter.
func (key *Key) Allow(model string) error {
	if len(key.Models) == 0 {
		return nil
	}
	for _, p := range key.Models {
		if match(p, model) {
			return nil
		}
	}
	return &apierr.Error{Kind: apierr.Permission, Param: "model", Code: "MODEL_NOT_ALLOWED",
		Message: "model: this API key may not use model " + quote(model)}
}

// match reports whether s matches pattern, where '*' matches any run of characters (slashes
// included: model names such as "meta-llama/Llama-3" have them) and everything else is literal.
// It backtracks only to the last star, so its time is O(len(pattern)·len(s)) at worst, whatever
// model name a client sends.
func match(pattern, s string) bool {
	px, sx := 0, 0
	starPx, starSx := -1, 0 // where to resume after the last star
	for px < len(pattern) || sx < len(s) {
		if px < len(pattern) {
			switch c := pattern[px]; {
			case c == '*':
				starPx, starSx = px, sx
				px++
				continue
			case sx < len(s) && s[sx] == c:
				px++
				sx++
				continue
			}
		}
		if starPx >= 0 && starSx < len(s) {
			// Let the last star absorb one more character and try again from there.
			starSx++
			px, sx = starPx+1, starSx
			continue
		}
		return false
	}
	return true
}

// hashOf hashes a presented key through a stack buffer: converting a string longer than 32 bytes
// to []byte would allocate on every request.
func hashOf(secret string) [32]byte {
	var buf [128]byte
	if len(secret) > len(buf) {
		return sha256.Sum256([]byte(secret)) // longer than any key NewKey makes
	}
	n := copy(buf[:], secret)
	return sha256.Sum256(buf[:n])
}

// quote quotes a client-supplied name for a message, cut to a readable length.
func quote(s string) string {
	if len(s) > 128 {
		s = s[:128] + "…"
	}
	return strconv.Quote(s)
}

// CheckListen enforces the rule for running without keys: with no keys, layer0 serves without
// auth only on a loopback address (and the caller says so at start); on any other address it
// refuses to start.
func (k *Keys) CheckListen(addr string) error {
	if k.Len() > 0 || Loopback(addr) {
		return nil
	}
	return fmt.Errorf("auth: no API keys are configured and %s is not a loopback address: "+
		"declare keys (layer0 keys new prints one) or listen on 127.0.0.1", addr)
}

// Loopback reports whether addr (HOST:PORT or HOST) names only this machine: a loopback IP or
// "localhost". An empty host (all interfaces) is not loopback.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]")
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
