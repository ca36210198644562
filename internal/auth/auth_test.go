package auth

import (
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/limit"
)

const (
	// As long as the keys NewKey makes, so the allocation guard covers real lengths.
	aliceKey = "l0-alice0000000000000000000000000000000000000000"
	bobKey   = "l0-bob0000000000000000000000000000000000000000000"
)

func testKeys(t testing.TB) *Keys {
	t.Helper()
	k, err := New([]Spec{
		{Name: "alice", Hash: HashHex(aliceKey), Limits: limit.Limits{RequestsPerMinute: 60}},
		{Name: "bob", Hash: strings.ToUpper(HashHex(bobKey)), Models: []string{"claude-*", "sim", "meta-llama/*-instruct"}},
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return k
}

func TestAuthenticate(t *testing.T) {
	keys := testKeys(t)
	tests := []struct {
		name     string
		header   http.Header
		wantKey  string
		wantCode string // X-Error-Code of the 401
	}{
		{"x-api-key", http.Header{"X-Api-Key": {aliceKey}}, "alice", ""},
		{"bearer", http.Header{"Authorization": {"Bearer " + bobKey}}, "bob", ""},
		{"bearer any case and spaces", http.Header{"Authorization": {"bEaReR   " + bobKey + " "}}, "bob", ""},
		{"x-api-key wins over bearer", http.Header{"X-Api-Key": {aliceKey}, "Authorization": {"Bearer " + bobKey}}, "alice", ""},
		{"empty x-api-key falls back to bearer", http.Header{"X-Api-Key": {""}, "Authorization": {"Bearer " + bobKey}}, "bob", ""},
		{"x-api-key twice, the same", http.Header{"X-Api-Key": {aliceKey, aliceKey}}, "alice", ""},
		{"x-api-key twice, different", http.Header{"X-Api-Key": {aliceKey, bobKey}}, "", "AMBIGUOUS_API_KEY"},
		{"bearer twice, different", http.Header{"Authorization": {"Bearer " + bobKey, "Bearer " + aliceKey}}, "", "AMBIGUOUS_API_KEY"},
		{"x-api-key and two bearers", http.Header{"X-Api-Key": {aliceKey}, "Authorization": {"Bearer " + bobKey, "Bearer x"}}, "", "AMBIGUOUS_API_KEY"},
		{"no header", http.Header{}, "", "MISSING_API_KEY"},
		{"empty bearer", http.Header{"Authorization": {"Bearer "}}, "", "MISSING_API_KEY"},
		{"basic scheme", http.Header{"Authorization": {"Basic " + aliceKey}}, "", "MISSING_API_KEY"},
		{"bare token", http.Header{"Authorization": {aliceKey}}, "", "MISSING_API_KEY"},
		{"wrong key", http.Header{"X-Api-Key": {"l0-guess"}}, "", "INVALID_API_KEY"},
		{"wrong bearer", http.Header{"Authorization": {"Bearer l0-guess"}}, "", "INVALID_API_KEY"},
		{"key with a trailing space", http.Header{"X-Api-Key": {aliceKey + " "}}, "", "INVALID_API_KEY"},
		{"a key longer than any real one", http.Header{"X-Api-Key": {strings.Repeat("k", 300)}}, "", "INVALID_API_KEY"},
		{"the hash is not the key", http.Header{"X-Api-Key": {HashHex(aliceKey)}}, "", "INVALID_API_KEY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, err := keys.Authenticate(tt.header)
			if tt.wantCode == "" {
				if err != nil || key == nil || key.Name != tt.wantKey {
					t.Fatalf("got (%v, %v), want key %q", key, err, tt.wantKey)
				}
				return
			}
			e := apierr.From(err)
			if key != nil || e == nil || e.Kind != apierr.Authentication || e.Code != tt.wantCode {
				t.Fatalf("got (%v, %v), want a 401 with code %s", key, err, tt.wantCode)
			}
			for _, vs := range tt.header {
				for _, v := range vs {
					if secret := strings.TrimSpace(strings.TrimPrefix(v, "Bearer")); len(secret) > 3 && strings.Contains(e.Error(), secret) {
						t.Errorf("error %q echoes what the client sent", e.Error())
					}
				}
			}
		})
	}
}

func TestAuthenticateNoKeys(t *testing.T) {
	for _, keys := range []*Keys{nil, mustNew(t, nil)} {
		_, err := keys.Authenticate(http.Header{"X-Api-Key": {aliceKey}})
		if e := apierr.From(err); e == nil || e.Code != "INVALID_API_KEY" {
			t.Errorf("got %v, want invalid API key", err)
		}
	}
}

func mustNew(t *testing.T, specs []Spec) *Keys {
	t.Helper()
	k, err := New(specs)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestAllow(t *testing.T) {
	keys := testKeys(t)
	alice, bob := keys.All()[0], keys.All()[1]
	tests := []struct {
		key   *Key
		model string
		want  bool
	}{
		{alice, "anything", true},
		{bob, "sim", true},
		{bob, "sim2", false},
		{bob, "claude-", true},
		{bob, "claude-sonnet-4-5", true},
		{bob, "claude", false},
		{bob, "Claude-sonnet", false},
		{bob, "meta-llama/Llama-3-8b-instruct", true},
		{bob, "meta-llama/Llama-3-8b", false},
		{bob, "", false},
	}
	for _, tt := range tests {
		err := tt.key.Allow(tt.model)
		if (err == nil) != tt.want {
			t.Errorf("%s.Allow(%q): got %v, want allowed %v", tt.key.Name, tt.model, err, tt.want)
			continue
		}
		if err != nil {
			e := apierr.From(err)
			if e.Kind != apierr.Permission || e.Param != "model" || !strings.Contains(e.Message, `"`+tt.model+`"`) {
				t.Errorf("%s.Allow(%q): got %#v, want a 403 naming the model", tt.key.Name, tt.model, e)
			}
		}
	}
}

func TestMatch(t *testing.T) {
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true},
		{"*", "x/y", true},
		{"a*c", "abc", true},
		{"a*c", "abcd", false},
		{"a*b*c", "a-b-b-c", true},
		{"a*b*c", "acb", false},
		{"**", "x", true},
		{"*-instruct", "x-instruct", true},
		{"exact", "exact", true},
		{"exact", "exactly", false},
	}
	for _, tt := range tests {
		if got := match(tt.pattern, tt.s); got != tt.want {
			t.Errorf("match(%q, %q): got %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
}

func TestNewValidates(t *testing.T) {
	h := HashHex("k")
	_, err := New([]Spec{
		{Name: "ok", Hash: h},
		{Name: "", Hash: HashHex("other")},
		{Name: "ok", Hash: HashHex("third")},
		{Name: "short", Hash: "abcd"},
		{Name: "nothex", Hash: strings.Repeat("zz", 32)},
		{Name: "dup", Hash: h},
		{Name: "emptymodel", Hash: HashHex("fourth"), Models: []string{"a", ""}},
	})
	if err == nil {
		t.Fatal("got nil, want errors")
	}
	got := strings.Split(err.Error(), "\n")
	want := []string{
		"auth: keys[1].name: required",
		`auth: keys[2].name: "ok" is also the name of keys[0]`,
		"auth: keys[3].hash: want 64 hex digits (a SHA-256), got 4 characters",
		"auth: keys[4].hash: not hexadecimal",
		`auth: keys[5].hash: same key as "ok"`,
		"auth: keys[6].models[1]: empty model name",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}
}

func TestKeysAccessors(t *testing.T) {
	keys := testKeys(t)
	if got := keys.Len(); got != 2 {
		t.Errorf("got Len %d, want 2", got)
	}
	want := map[string]limit.Limits{"alice": {RequestsPerMinute: 60}, "bob": {}}
	if diff := cmp.Diff(want, keys.Limits()); diff != "" {
		t.Errorf("Limits (-want +got):\n%s", diff)
	}
	var none *Keys
	if none.Len() != 0 || none.All() != nil || len(none.Limits()) != 0 {
		t.Errorf("nil Keys: got %d keys, want none", none.Len())
	}
}

func TestNewKey(t *testing.T) {
	seen := map[string]bool{}
	for range 50 {
		key, hash := NewKey()
		if !strings.HasPrefix(key, Prefix) || len(key) != len(Prefix)+keyDigits {
			t.Fatalf("got key %q, want %s and %d base62 digits", key, Prefix, keyDigits)
		}
		for _, c := range key[len(Prefix):] {
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
				t.Fatalf("got key %q, want only base62 digits after the prefix", key)
			}
		}
		if hash != HashHex(key) {
			t.Fatalf("got hash %s, want SHA-256 of the key %s", hash, HashHex(key))
		}
		if seen[key] {
			t.Fatalf("key %q made twice", key)
		}
		seen[key] = true
		// A fresh key works end to end.
		keys := mustNew(t, []Spec{{Name: "n", Hash: hash}})
		if k, err := keys.Authenticate(http.Header{"Authorization": {"Bearer " + key}}); err != nil || k.Name != "n" {
			t.Fatalf("fresh key: got (%v, %v), want key n", k, err)
		}
	}
}

func TestCheckListen(t *testing.T) {
	keys := testKeys(t)
	tests := []struct {
		addr         string
		wantLoopback bool
	}{
		{"127.0.0.1:8080", true},
		{"127.8.9.10:1", true},
		{"[::1]:8080", true},
		{"::1", true},
		{"localhost:8080", true},
		{"LOCALHOST", true},
		{":8080", false},
		{"0.0.0.0:8080", false},
		{"[::]:8080", false},
		{"10.0.0.5:8080", false},
		{"example.com:443", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := Loopback(tt.addr); got != tt.wantLoopback {
			t.Errorf("Loopback(%q): got %v, want %v", tt.addr, got, tt.wantLoopback)
		}
		var none *Keys
		err := none.CheckListen(tt.addr)
		if (err == nil) != tt.wantLoopback {
			t.Errorf("no keys, CheckListen(%q): got %v, want error %v", tt.addr, err, !tt.wantLoopback)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "auth: no API keys are configured and "+tt.addr+" is not a loopback address") {
			t.Errorf("CheckListen(%q): got %q, want it to name the address", tt.addr, err)
		}
		if err := keys.CheckListen(tt.addr); err != nil {
			t.Errorf("with keys, CheckListen(%q): got %v, want nil", tt.addr, err)
		}
	}
}

func TestAuthenticateConcurrent(t *testing.T) {
	keys := testKeys(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := http.Header{"X-Api-Key": {aliceKey}}
			if i%2 == 1 {
				h = http.Header{"Authorization": {"Bearer " + bobKey}}
			}
			for range 200 {
				if _, err := keys.Authenticate(h); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestAuthenticateAllocs(t *testing.T) {
	keys := testKeys(t)
	for _, h := range []http.Header{
		{"X-Api-Key": {aliceKey}},
		{"Authorization": {"Bearer " + bobKey}},
	} {
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := keys.Authenticate(h); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%v: got %v allocs, want 0", h, allocs)
		}
	}
}

func BenchmarkAuthenticate(b *testing.B) {
	specs := make([]Spec, 1000)
	for i := range specs {
		_, h := NewKey()
		specs[i] = Spec{Name: "k" + HashHex(h)[:8], Hash: h}
	}
	key, h := NewKey()
	specs = append(specs, Spec{Name: "me", Hash: h})
	keys, err := New(specs)
	if err != nil {
		b.Fatal(err)
	}
	hdr := http.Header{"X-Api-Key": {key}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := keys.Authenticate(hdr); err != nil {
			b.Fatal(err)
		}
	}
}

func TestLongKey(t *testing.T) {
	long := "l0-" + strings.Repeat("x", 500)
	keys := mustNew(t, []Spec{{Name: "long", Hash: HashHex(long)}})
	if k, err := keys.Authenticate(http.Header{"X-Api-Key": {long}}); err != nil || k.Name != "long" {
		t.Errorf("got (%v, %v), want key long", k, err)
	}
}

// FuzzMatch checks the glob matcher against a regular expression built from the same pattern.
func FuzzMatch(f *testing.F) {
	f.Add("claude-*", "claude-sonnet-4-5")
	f.Add("*a*b", "xaxxb")
	f.Add("a**", "a")
	f.Fuzz(func(t *testing.T, pattern, s string) {
		// regexp works on runes; on valid UTF-8 that is the same as matching bytes.
		if len(pattern) > 64 || len(s) > 256 || !utf8.ValidString(pattern) || !utf8.ValidString(s) {
			return
		}
		parts := strings.Split(pattern, "*")
		for i, p := range parts {
			parts[i] = regexp.QuoteMeta(p)
		}
		re := regexp.MustCompile(`^(?s:` + strings.Join(parts, ".*") + `)$`)
		if got, want := match(pattern, s), re.MatchString(s); got != want {
			t.Errorf("match(%q, %q): got %v, want %v", pattern, s, got, want)
		}
	})
}

// TestMatchIsNotExponential guards against backtracking blow-up on a client-chosen model name.
func TestMatchIsNotExponential(t *testing.T) {
	s := strings.Repeat("a", 1<<16)
	if match("*a*a*a*a*a*a*b", s) {
		t.Error("got a match, want none")
	}
}
