package cache_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/cache"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/store"
	"github.com/layer0ai/layer0/internal/store/redistest"
)

// sharedPair returns two shared stores on one real Redis, as two replicas would have, with the
// store's connection of each keeping its health.
func sharedPair(t *testing.T, srv *redistest.Server, c cache.RedisConfig) (*cache.Shared, *cache.Shared, *store.Redis) {
	t.Helper()
	var out [2]*cache.Shared
	var first *store.Redis
	for i := range out {
		client, err := store.Dial([]string{srv.URL()}, "", 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		st, err := store.New(store.Config{Client: client, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		if first == nil {
			first = st
		}
		c.Store, c.Timeout = st, 2*time.Second
		out[i] = cache.NewShared(c, cache.NewMemory(1<<20, nil))
	}
	return out[0], out[1], first
}

func answer(text string) *cache.Entry {
	return &cache.Entry{Model: "m-1", Served: "m", Engine: "e0", Simulated: true, Stored: time.Unix(1_800_000_000, 0).UTC(),
		Usage: llm.Usage{InputTokens: 7, OutputTokens: 3},
		Events: []llm.Event{{Kind: llm.EventStart, Model: "m-1", Usage: llm.Usage{InputTokens: 7}},
			{Kind: llm.EventBlockStart, Block: llm.BlockText}, {Kind: llm.EventTextDelta, Text: text},
			{Kind: llm.EventBlockStop}, {Kind: llm.EventStop, Stop: llm.StopEndTurn, Usage: llm.Usage{InputTokens: 7, OutputTokens: 3}}}}
}

// TestSharedStore: an entry put by one replica is read by the other exactly as it was stored;
// it is written once (a second Put does not replace it); one larger than the cap stays in the
// putting replica's memory only; a fill claimed by one replica is waited for by the other.
func TestSharedStore(t *testing.T) {
	srv := redistest.Start(t)
	a, b, _ := sharedPair(t, srv, cache.RedisConfig{MaxEntryBytes: 2048, FillWait: 3 * time.Second})
	ctx := context.Background()
	k1 := cache.Key{1}
	e := answer("hello")
	if err := a.Put(ctx, k1, e, time.Minute); err != nil {
		t.Fatal(err)
	}
	got, ok := b.Get(ctx, k1)
	if !ok || !reflect.DeepEqual(got, e) {
		t.Fatalf("B's read of A's entry: %v\n got  %+v\n want %+v", ok, got, e)
	}
	if _, ok := b.L1().Get(ctx, k1); !ok {
		t.Errorf("B's hit from Redis is not in its L1")
	}
	if err := b.Put(ctx, k1, answer("another"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.Get(ctx, k1); got.Events[2].Text != "hello" {
		t.Errorf("written once: the entry became %q", got.Events[2].Text)
	}

	k2 := cache.Key{2}
	big := answer(strings.Repeat("x", 4096))
	if err := a.Put(ctx, k2, big, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Get(ctx, k2); !ok {
		t.Errorf("the large entry is not in A's memory")
	}
	if _, ok := b.Get(ctx, k2); ok {
		t.Errorf("an entry over max_entry_bytes reached Redis")
	}

	// A claims k3's fill; B's claim waits and gets A's entry once A stores it.
	k3 := cache.Key{3}
	if got := a.Claim(ctx, k3); got != nil {
		t.Fatalf("A's claim of a new key: %+v, want nil (A fills it)", got)
	}
	done := make(chan *cache.Entry)
	go func() { done <- b.Claim(ctx, k3) }()
	time.Sleep(200 * time.Millisecond)
	if err := a.Put(ctx, k3, answer("filled by A"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := <-done; got == nil || got.Events[2].Text != "filled by A" {
		t.Errorf("B's wait for A's fill: %+v", got)
	}
	// A claim given up ends the others' wait at once, without an entry.
	k4 := cache.Key{4}
	a.Claim(ctx, k4)
	go func() { done <- b.Claim(ctx, k4) }()
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	a.Unclaim(ctx, k4)
	if got := <-done; got != nil {
		t.Errorf("B's wait after A gave up: %+v, want nil", got)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("B waited %v after A gave up its claim; the wait is bounded by 3s, the poll is 20ms", took)
	}
}
