package sim

import (
	"fmt"
	"strings"

	"github.com/layer0ai/layer0/internal/prefix"
	"github.com/layer0ai/layer0/internal/tokenizer"
)

// lorem text is made of sentences from a small grammar,
//
//	Det Adj? Noun Verb Det Adj? Noun [Prep Det Noun] [, Conj Det Noun Verb Adv] .
//
// where every word, with its leading space, is one cl100k_base token, and so are "," "." and
// ".\n\n" (a paragraph break). The generator therefore emits token ids directly, with no
// encoding pass, and re-encoding the text gives the same ids back (a test proves it): the
// output token count is exact.
var grammar = struct {
	det, adj, noun, verb, prep, adv, conj []string
}{
	det:  []string{"the", "each", "every", "this", "that", "our", "their", "one", "some"},
	adj:  []string{"quick", "small", "large", "simple", "careful", "clear", "early", "final", "local", "main", "new", "old", "open", "quiet", "real", "short", "steady", "strong", "whole", "bright", "calm", "common", "direct", "fresh", "gentle", "good", "great", "high", "long", "low", "modern", "plain", "rapid", "rare", "ready", "smooth", "solid", "stable", "warm"},
	noun: []string{"system", "model", "request", "answer", "stream", "token", "engine", "server", "record", "cache", "field", "signal", "window", "path", "rule", "table", "story", "river", "garden", "city", "voice", "letter", "market", "bridge", "light", "morning", "question", "reason", "result", "method", "pattern", "process", "network", "message", "number", "value", "line", "page", "house", "road", "tree", "world", "team", "plan", "idea"},
	verb: []string{"reads", "sends", "holds", "keeps", "finds", "moves", "builds", "turns", "opens", "takes", "makes", "gives", "shows", "brings", "follows", "carries", "changes", "checks", "meets", "writes", "leaves", "starts", "needs", "sees"},
	prep: []string{"in", "on", "with", "from", "through", "across", "under", "over", "near", "after", "before", "into", "along", "beyond"},
	adv:  []string{"quickly", "slowly", "again", "often", "always", "never", "still", "soon", "quietly", "gently", "clearly", "today"},
	conj: []string{"and", "but", "so", "while", "because"},
}

// lexicon holds the grammar as token ids.
type lexicon struct {
	det, adj, noun, verb, prep, adv, conj []uint32 // " word"
	detCap                                []uint32 // " Word": a sentence's first word
	detCapStart                           []uint32 // "Word": first word of a paragraph
	comma, period, paragraph              uint32
}

func newLexicon(tok *tokenizer.Codec) (*lexicon, error) {
	var err error
	one := func(s string) uint32 {
		id, ok := tok.Rank(s)
		if !ok && err == nil {
			err = fmt.Errorf("sim: lorem word %q is not one token", s)
		}
		return id
	}
	ids := func(words []string, prefix string, title bool) []uint32 {
		out := make([]uint32, len(words))
		for i, w := range words {
			if title {
				w = strings.ToUpper(w[:1]) + w[1:]
			}
			out[i] = one(prefix + w)
		}
		return out
	}
	g := &grammar
	l := &lexicon{
		det: ids(g.det, " ", false), adj: ids(g.adj, " ", false), noun: ids(g.noun, " ", false),
		verb: ids(g.verb, " ", false), prep: ids(g.prep, " ", false), adv: ids(g.adv, " ", false),
		conj: ids(g.conj, " ", false), detCap: ids(g.det, " ", true), detCapStart: ids(g.det, "", true),
		comma: one(","), period: one("."), paragraph: one(".\n\n"),
	}
	return l, err
}

// rng is splitmix64: tiny, fast and good enough to pick words.
type rng uint64

func (r *rng) next() uint64 {
	*r += 0x9e3779b97f4a7c15
	return prefix.Mix(uint64(*r))
}

// intn returns a number in [0, n).
func (r *rng) intn(n int) int { return int(r.next() % uint64(n)) }

func (r *rng) pick(words []uint32) uint32 { return words[r.intn(len(words))] }

// generate appends whole sentences of lorem text to dst until at least target tokens, or until
// more than limit, and returns dst; the same seed always gives the same text.
func (l *lexicon) generate(dst []uint32, seed uint64, target, limit int) []uint32 {
	r := rng(seed)
	start := len(dst)
	n := func() int { return len(dst) - start }
	paragraphStart := true
	for n() < target && n() <= limit {
		if paragraphStart {
			dst = append(dst, r.pick(l.detCapStart))
		} else {
			dst = append(dst, r.pick(l.detCap))
		}
		dst = l.nounPhrase(dst, &r)
		dst = append(dst, r.pick(l.verb), r.pick(l.det))
		dst = l.nounPhrase(dst, &r)
		if r.intn(2) == 0 {
			dst = append(dst, r.pick(l.prep), r.pick(l.det), r.pick(l.noun))
		}
		if r.intn(3) == 0 {
			dst = append(dst, l.comma, r.pick(l.conj), r.pick(l.det))
			dst = l.nounPhrase(dst, &r)
			dst = append(dst, r.pick(l.verb), r.pick(l.adv))
		}
		// A paragraph ends one sentence in four, never the text: ".\n\n" is one token, and the
		// text must end with ".".
		paragraphStart = r.intn(4) == 0 && n()+1 < target
		if paragraphStart {
			dst = append(dst, l.paragraph)
		} else {
			dst = append(dst, l.period)
		}
	}
	return dst
}

// nounPhrase appends [Adj] Noun.
func (l *lexicon) nounPhrase(dst []uint32, r *rng) []uint32 {
	if r.intn(2) == 0 {
		dst = append(dst, r.pick(l.adj))
	}
	return append(dst, r.pick(l.noun))
}
