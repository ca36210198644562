package conversation

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/fakeclock"
	"github.com/layer0ai/layer0/internal/llm"
)

func entry(id, owner, text string) *Entry {
	return &Entry{ID: id, Owner: owner, System: []llm.Block{{Type: llm.BlockText, Text: "sys"}},
		Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: text}}}},
		Object:   []byte(`{"id":"` + id + `"}`)}
}

func notFound(t *testing.T, what string, err error) {
	t.Helper()
	var e *apierr.Error
	if !errors.As(err, &e) || e.Kind != apierr.NotFound {
		t.Errorf("%s: got %v, want not found", what, err)
	}
}

func TestStoreOwner(t *testing.T) {
	ctx := context.Background()
	s := NewMemory(time.Hour, 1<<20, nil)
	want := entry("resp_1", "alice", "hello")
	if err := s.Put(ctx, want); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "alice", "resp_1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Get (-want +got):\n%s", diff)
	}
	_, err = s.Get(ctx, "bob", "resp_1")
	notFound(t, "another owner's Get", err)
	notFound(t, "another owner's Delete", s.Delete(ctx, "bob", "resp_1"))
	if err := s.Delete(ctx, "alice", "resp_1"); err != nil {
		t.Fatal(err)
	}
	_, err = s.Get(ctx, "alice", "resp_1")
	notFound(t, "Get after Delete", err)
	notFound(t, "Delete twice", s.Delete(ctx, "alice", "resp_1"))
}

func TestStoreTTL(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(time.Unix(1e9, 0))
	s := NewMemory(time.Minute, 1<<20, clk.Now)
	_ = s.Put(ctx, entry("resp_1", "", "a"))
	clk.Advance(30 * time.Second)
	_ = s.Put(ctx, entry("resp_2", "", "b"))
	clk.Advance(30 * time.Second)
	_, err := s.Get(ctx, "", "resp_1")
	notFound(t, "an entry at its TTL", err)
	if _, err := s.Get(ctx, "", "resp_2"); err != nil {
		t.Errorf("an entry within its TTL: %v", err)
	}
	clk.Advance(time.Minute)
	_ = s.Put(ctx, entry("resp_3", "", "c")) // sweeps the expired
	if n, _ := s.Len(); n != 1 {
		t.Errorf("got %d entries after the sweep, want 1", n)
	}
}

func TestStoreBound(t *testing.T) {
	ctx := context.Background()
	one := entry("resp_0", "", strings.Repeat("x", 100))
	s := NewMemory(time.Hour, 1<<20, nil)
	size := func() int64 { _, b := s.Len(); return b }
	_ = s.Put(ctx, one)
	perEntry := size()
	s = NewMemory(time.Hour, 3*perEntry, nil)
	for _, id := range []string{"resp_0", "resp_1", "resp_2", "resp_3"} {
		if err := s.Put(ctx, entry(id, "", strings.Repeat("x", 100))); err != nil {
			t.Fatal(err)
		}
	}
	if n, b := s.Len(); n != 3 || b > 3*perEntry {
		t.Errorf("got %d entries of %d bytes, want 3 within %d", n, b, 3*perEntry)
	}
	_, err := s.Get(ctx, "", "resp_0")
	notFound(t, "the oldest entry past the bound", err)
	if _, err := s.Get(ctx, "", "resp_3"); err != nil {
		t.Errorf("the newest entry: %v", err)
	}
	// An entry larger than the whole bound is not kept, and evicts nothing.
	_ = s.Put(ctx, entry("resp_big", "", strings.Repeat("x", 10000)))
	_, err = s.Get(ctx, "", "resp_big")
	notFound(t, "an entry over the bound", err)
	if n, _ := s.Len(); n != 3 {
		t.Errorf("got %d entries, want 3", n)
	}
}

// TestStoreFairEviction: one key that stores far more than the bound evicts its own oldest
// entries, never another key's; with two keys over their share, the one holding more goes first.
func TestStoreFairEviction(t *testing.T) {
	ctx := context.Background()
	big := strings.Repeat("x", 900)
	size := func() int64 {
		s := NewMemory(time.Hour, 1<<20, nil)
		_ = s.Put(ctx, entry("resp_size", "bob", big))
		_, n := s.Len()
		return n
	}()
	s := NewMemory(time.Hour, 10*size, nil)
	if err := s.Put(ctx, entry("resp_alice", "alice", big)); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if err := s.Put(ctx, entry(fmt.Sprintf("resp_bob_%03d", i), "bob", big)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Get(ctx, "alice", "resp_alice"); err != nil {
		t.Errorf("alice's response after bob stored 50: %v, want it kept", err)
	}
	if _, err := s.Get(ctx, "bob", "resp_bob_049"); err != nil {
		t.Errorf("bob's newest: %v, want it kept", err)
	}
	notFound(t, "bob's oldest", func() error { _, err := s.Get(ctx, "bob", "resp_bob_000"); return err }())
	if n, b := s.Len(); n < 9 || b > 10*size {
		t.Errorf("%d entries, %d bytes; want the bound (%d) nearly full", n, b, 10*size)
	}
}
