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
// 429 errors from Acquire carry the same headers already.
func (l *Limiter) Header(name string, h http.Header) {
	if l == nil {
		return
	}
	if key, ok := l.keys[name]; ok {
		l.header(context.Background(), key, l.now(), h)
	}
}

func (l *Limiter) header(ctx context.Context, key *scope, now time.Time, h http.Header) {
	req, okReq := tightest(ctx, now, &key.req, &l.global.req)
	in, okIn := tightest(ctx, now, &key.in, &l.global.in)
	out, okOut := tightest(ctx, now, &key.out, &l.global.out)
	if okReq {
		setAnthropic(h, now, req, hAnthropicRequestsLimit, hAnthropicRequestsRemaining, hAnthropicRequestsReset)
		setOpenAI(h, now, req, hOpenAILimitRequests, hOpenAIRemainingRequests, hOpenAIResetRequests)
	}
	if okIn {
		setAnthropic(h, now, in, hAnthropicInputTokensLimit, hAnthropicInputTokensRemaining, hAnthropicInputTokensReset)
		setOpenAI(h, now, in, hOpenAILimitTokens, hOpenAIRemainingTokens, hOpenAIResetTokens)
	}
	if okOut {
		setAnthropic(h, now, out, hAnthropicOutputTokensLimit, hAnthropicOutputTokensRemaining, hAnthropicOutputTokensReset)
		if !okIn {
			setOpenAI(h, now, out, hOpenAILimitTokens, hOpenAIRemainingTokens, hOpenAIResetTokens)
		}
	}
}

// tightest returns the status of whichever configured slot has fewer units remaining (the later
// reset on a tie). A slot whose store fails is skipped: headers are advice, not enforcement.
func tightest(ctx context.Context, now time.Time, slots ...*rateSlot) (Status, bool) {
	var best Status
	found := false
	for _, s := range slots {
		if s.cell == nil {
			continue
		}
		st, err := s.cell.Peek(ctx, now, s.rate)
		if err != nil {
			continue
		}
		if !found || st.Remaining < best.Remaining || (st.Remaining == best.Remaining && st.Reset.After(best.Reset)) {
			best, found = st, true
		}
	}
	return best, found
}

func setAnthropic(h http.Header, now time.Time, st Status, limit, remaining, reset string) {
	h[limit] = []string{strconv.FormatInt(st.Limit, 10)}
	h[remaining] = []string{strconv.FormatInt(st.Remaining, 10)}
	h[reset] = []string{resetTime(now, st.Reset).UTC().Format(time.RFC3339)}
}

func setOpenAI(h http.Header, now time.Time, st Status, limit, remaining, reset string) {
	h[limit] = []string{strconv.FormatInt(st.Limit, 10)}
	h[remaining] = []string{strconv.FormatInt(st.Remaining, 10)}
	h[reset] = []string{roundUp(max(st.Reset.Sub(now), 0)).String()}
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
