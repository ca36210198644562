package limit

import (
	"context"
	"net/http"
	"strconv"
	"time"
)

// Rate-limit response headers, in canonical form so they are set without re-canonicalizing.
// Anthropic sends limit/remaining/reset per dimension with reset as an RFC 3339 time; OpenAI sends
// x-ratelimit-{limit,remaining,reset}-{requests,tokens} with reset as a duration ("1s", "6m0s").
const (
	hAnthropicRequestsLimit         = "Anthropic-Ratelimit-Requests-Limit"
	hAnthropicRequestsRemaining     = "Anthropic-Ratelimit-Requests-Remaining"
	hAnthropicRequestsReset         = "Anthropic-Ratelimit-Requests-Reset"
	hAnthropicInputTokensLimit      = "Anthropic-Ratelimit-Input-Tokens-Limit"
	hAnthropicInputTokensRemaining  = "Anthropic-Ratelimit-Input-Tokens-Remaining"
	hAnthropicInputTokensReset      = "Anthropic-Ratelimit-Input-Tokens-Reset"
	hAnthropicOutputTokensLimit     = "Anthropic-Ratelimit-Output-Tokens-Limit"
	hAnthropicOutputTokensRemaining = "Anthropic-Ratelimit-Output-Tokens-Remaining"
	hAnthropicOutputTokensReset     = "Anthropic-Ratelimit-Output-Tokens-Reset"
	hOpenAILimitRequests            = "X-Ratelimit-Limit-Requests"
	hOpenAIRemainingRequests        = "X-Ratelimit-Remaining-Requests"
	hOpenAIResetRequests            = "X-Ratelimit-Reset-Requests"
	hOpenAILimitTokens              = "X-Ratelimit-Limit-Tokens"
	hOpenAIRemainingTokens          = "X-Ratelimit-Remaining-Tokens"
	hOpenAIResetTokens              = "X-Ratelimit-Reset-Tokens"
)

// Header sets on h the rate-limit headers describing key name's current state: for each limited
// dimension, the most restrictive of the key's and the global limit (the one with fewer units
// remaining). OpenAI's "tokens" headers describe input tokens when those are limited, output
// tokens otherwise. Dimensions without a limit get no headers; an unknown name gets none. The
// 429 errors from Acquire carry the same headers already, except that OpenAI's tokens headers of
// a refusal by the output-token limit describe output tokens, the limit its retry-after is for.
func (l *Limiter) Header(name string, h http.Header) {
	if l == nil {
		return
	}
	if key, ok := l.keys[name]; ok {
		l.header(context.Background(), key, l.now(), h, false)
	}
}

// Header sets the rate-limit headers for the lease's key on h (see Limiter.Header).
func (ls *Lease) Header(h http.Header) {
	if ls.l == nil {
		return
	}
	now := ls.l.now()
	if ls.l.redis != nil {
		// From the state this request's own operations saw, with the tokens it owes: no round
		// trip. A cell none of them touched (no input counted) is read.
		all := ls.slots()
		var sts [6]Status
		var found [6]bool
		complete := true
		for i, s := range all {
			if s.cell == nil {
				continue
			}
			if ls.known&(1<<i) == 0 {
				complete = false
				break
			}
			tat, n := ls.seen[i], now.UnixNano()
			switch {
			case i == 2 || i == 3:
				tat = gcraAdd(tat, n, s.rate, ls.owedIn)
			case i >= 4:
				tat = gcraAdd(tat, n, s.rate, ls.owedOut)
			}
			sts[i], found[i] = status(tat, n, s.rate), true
		}
		if complete {
			writeHeader(now, sts, found, h, false)
			return
		}
	}
	if ls.owedIn != 0 || ls.owedOut != 0 {
		_ = ls.flush() // the headers describe the state with this request's tokens
	}
	ls.l.header(context.Background(), ls.key, now, h, false)
}

// header sets the headers of key's state on h; outTokens makes OpenAI's tokens headers describe
// output tokens even where input tokens are limited (a refusal by the output-token limit).
func (l *Limiter) header(ctx context.Context, key *scope, now time.Time, h http.Header, outTokens bool) {
	slots := [6]*rateSlot{&key.req, &l.global.req, &key.in, &l.global.in, &key.out, &l.global.out}
	var sts [6]Status
	var found [6]bool
	l.peek(ctx, now, slots[:], sts[:], found[:])
	writeHeader(now, sts, found, h, outTokens)
}

// writeHeader sets the headers from the statuses of a key's and the global rate cells, in the
// order requests, input, output (the key's then the global), where found. OpenAI's tokens headers
// describe input tokens when those are limited and outTokens is unset, output tokens otherwise.
func writeHeader(now time.Time, sts [6]Status, found [6]bool, h http.Header, outTokens bool) {
	req, okReq := tightest(sts[0:2], found[0:2])
	in, okIn := tightest(sts[2:4], found[2:4])
	out, okOut := tightest(sts[4:6], found[4:6])
	// The values are formatted in buf on the stack: headerWriter's methods take and return the
	// slice rather than keep it in a field, which would move buf to the heap.
	var buf [384]byte
	var w headerWriter
	b := buf[:0]
	if okReq {
		b = w.anthropic(b, now, req, hAnthropicRequestsLimit, hAnthropicRequestsRemaining, hAnthropicRequestsReset)
		b = w.openAI(b, now, req, hOpenAILimitRequests, hOpenAIRemainingRequests, hOpenAIResetRequests)
	}
	outTokens = outTokens && okOut
	if okIn {
		b = w.anthropic(b, now, in, hAnthropicInputTokensLimit, hAnthropicInputTokensRemaining, hAnthropicInputTokensReset)
		if !outTokens {
			b = w.openAI(b, now, in, hOpenAILimitTokens, hOpenAIRemainingTokens, hOpenAIResetTokens)
		}
	}
	if okOut {
		b = w.anthropic(b, now, out, hAnthropicOutputTokensLimit, hAnthropicOutputTokensRemaining, hAnthropicOutputTokensReset)
		if !okIn || outTokens {
			b = w.openAI(b, now, out, hOpenAILimitTokens, hOpenAIRemainingTokens, hOpenAIResetTokens)
		}
	}
	w.set(h, b)
}

// headerWriter notes up to 15 header values formatted into one buffer, which its methods append
// to and return, and sets them with one string and one slice allocation in all, rather than two
// per header: these headers go on every answer.
type headerWriter struct {
	names [15]string
	ends  [15]int
	n     int
}

// add notes the value that ends at end as header name's.
func (w *headerWriter) add(name string, end int) {
	w.names[w.n], w.ends[w.n] = name, end
	w.n++
}

func (w *headerWriter) anthropic(b []byte, now time.Time, st Status, limit, remaining, reset string) []byte {
	b = strconv.AppendInt(b, st.Limit, 10)
	w.add(limit, len(b))
	b = strconv.AppendInt(b, st.Remaining, 10)
	w.add(remaining, len(b))
	b = resetTime(now, st.Reset).UTC().AppendFormat(b, time.RFC3339)
	w.add(reset, len(b))
	return b
}

func (w *headerWriter) openAI(b []byte, now time.Time, st Status, limit, remaining, reset string) []byte {
	b = strconv.AppendInt(b, st.Limit, 10)
	w.add(limit, len(b))
	b = strconv.AppendInt(b, st.Remaining, 10)
	w.add(remaining, len(b))
	b = append(b, roundUp(max(st.Reset.Sub(now), 0)).String()...)
	w.add(reset, len(b))
	return b
}

// set sets the noted headers on h, their values copied out of b.
func (w *headerWriter) set(h http.Header, b []byte) {
	if w.n == 0 {
		return
	}
	text := string(b)
	vals := make([]string, w.n)
	start := 0
	for i := range w.n {
		vals[i] = text[start:w.ends[i]]
		start = w.ends[i]
		h[w.names[i]] = vals[i : i+1 : i+1]
	}
}

// peek reads the status of each configured slot into sts, setting found: in one round trip when
// the store is Redis, else cell by cell. A slot whose store fails is skipped: headers are advice,
// not enforcement.
func (l *Limiter) peek(ctx context.Context, now time.Time, slots []*rateSlot, sts []Status, found []bool) {
	if l.redis != nil && l.redis.batched() {
		var buf [6]rateOp
		ops := buf[:0]
		for _, s := range slots {
			if s.cell != nil {
				ops = append(ops, rateOp{slot: s, peek: true})
			}
		}
		if l.redis.rateOps(ctx, now, ops) {
			n := now.UnixNano()
			j := 0
			for i, s := range slots {
				if s.cell != nil {
					sts[i], found[i] = status(ops[j].tat, n, s.rate), true
					j++
				}
			}
			return
		}
	}
	for i, s := range slots {
		if s.cell == nil {
			continue
		}
		if st, err := s.cell.Peek(ctx, now, s.rate); err == nil {
			sts[i], found[i] = st, true
		}
	}
}

// tightest returns the status with fewer units remaining among those found (the later reset on
// a tie).
func tightest(sts []Status, found []bool) (Status, bool) {
	var best Status
	ok := false
	for i, st := range sts {
		if !found[i] {
			continue
		}
		if !ok || st.Remaining < best.Remaining || (st.Remaining == best.Remaining && st.Reset.After(best.Reset)) {
			best, ok = st, true
		}
	}
	return best, ok
}

// resetTime rounds a reset instant up to the whole second RFC 3339 shows, so it is never early.
func resetTime(now, reset time.Time) time.Time {
	if reset.Before(now) {
		reset = now
	}
	if t := reset.Truncate(time.Second); t.Before(reset) {
		return t.Add(time.Second)
	}
	return reset
}
