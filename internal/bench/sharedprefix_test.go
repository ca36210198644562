package bench

import (
	"strings"
	"testing"

	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/tokenizer"
)

// TestSharedPrefixPrompt: each group's system prompt is about the tokens asked for in the
// cl100k_base vocabulary, the same in every run, and different from the first words on.
func TestSharedPrefixPrompt(t *testing.T) {
	for _, n := range []int{100, 1000, 4000} {
		p := sharedPrefixPrompt(3, n)
		if got := tokenizer.Default().Count(p); got < n*95/100 || got > n*105/100 {
			t.Errorf("%d-token prompt: %d tokens", n, got)
		}
		if p != sharedPrefixPrompt(3, n) {
			t.Errorf("%d-token prompt differs between calls", n)
		}
	}
	a, b := sharedPrefixPrompt(1, 200), sharedPrefixPrompt(2, 200)
	if strings.HasPrefix(b, a[:10]) {
		t.Errorf("groups share their beginning: %q, %q", a[:20], b[:20])
	}
}

// TestSharedPrefixDraw: the skew sends its share of requests from group 0 and the rest evenly;
// a user's requests walk the turns of a conversation, then start the next one.
func TestSharedPrefixDraw(t *testing.T) {
	const n = 20000
	for _, skew := range []float64{0, 0.5} {
		d := newSPDraw(SharedPrefixConfig{Groups: 8, UsersPerGroup: 4, Turns: 3, Skew: skew, Seed: 1})
		perGroup := make([]int, 8)
		last := map[[2]int]spJob{}
		for range n {
			j := d.next()
			perGroup[j.group]++
			k := [2]int{j.group, j.user}
			if prev, ok := last[k]; ok {
				want := spJob{group: j.group, user: j.user, conv: prev.conv, turn: prev.turn + 1}
				if prev.turn == 2 {
					want.conv, want.turn = prev.conv+1, 0
				}
				if j != want {
					t.Fatalf("after %+v came %+v, want %+v", prev, j, want)
				}
			} else if j.conv != 0 || j.turn != 0 {
				t.Fatalf("first request of a user: %+v", j)
			}
			last[k] = j
		}
		want0 := n / 8
		if skew > 0 {
			want0 = int(skew * n)
		}
		if perGroup[0] < want0*95/100 || perGroup[0] > want0*105/100 {
			t.Errorf("skew %g: group 0 sent %d of %d, want about %d", skew, perGroup[0], n, want0)
		}
		for g := 1; g < 8; g++ {
			want := (n - want0) / 7
			if perGroup[g] < want*9/10 || perGroup[g] > want*11/10 {
				t.Errorf("skew %g: group %d sent %d, want about %d", skew, g, perGroup[g], want)
			}
		}
	}
}

func TestSharedPrefixConfigErrors(t *testing.T) {
	for _, c := range []SharedPrefixConfig{
		{},
		{URL: "ftp://x"},
		{URL: "http://127.0.0.1:1", Format: llm.FormatBinary},
		{URL: "http://127.0.0.1:1", Skew: 1.5},
		{URL: "http://127.0.0.1:1", Groups: 1, Skew: 0.5},
		{URL: "http://127.0.0.1:1", Turns: -1},
		{URL: "http://127.0.0.1:1", Models: []string{"a", ""}},
	} {
		if _, err := c.withDefaults(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}
