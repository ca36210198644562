package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestSpendCommand: layer0 spend reads /spend with the key and prints a line per budget and per
// key; an error answer is the gateway's own message.
func TestSpendCommand(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/spend" || r.Header.Get("X-Api-Key") != "l0-admin" {
			w.WriteHeader(http.StatusForbidden)
			w.Write([]byte(`{"type":"error","error":{"type":"permission_error","message":"only an admin API key may read the spend report"}}`))
			return
		}
		w.Write([]byte(`{"currency":"USD","teams":[{"name":"research","budgets":[{"budget":"team/\"research\"/money/5000000/day",
"unit":"money","limit":"5.000000","spent":"1.250000","reserved":"0.010000","left":"3.740000","period":"day","resets":"2026-12-04T00:00:00Z"}]}],
"keys":[{"name":"alice","team":"research","cost":"1.250000","tokens":4200,"requests":12}]}`))
	}))
	defer srv.Close()
	var out, errOut bytes.Buffer
	if err := runSpend([]string{"--url", srv.URL, "--key", "l0-admin"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"team research", "5.000000 USD per day", "1.250000", "3.740000", "alice", "4200"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	err := runSpend([]string{"--url", srv.URL, "--key", "l0-other"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "only an admin API key") {
		t.Errorf("refused: %v", err)
	}
}
