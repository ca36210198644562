package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/layer0ai/layer0/internal/bench"
)

// printReport writes the report for a person.
func printReport(w io.Writer, o options, res *result) {
	fmt.Fprintf(w, "layer0 performance report, %s\n", res.Started.Format(time.RFC3339))
	fmt.Fprintf(w, "machine   %s; load generator, layer0 and upstream share it\n", res.Machine)
	fmt.Fprintf(w, "load avg  %s at the start, %s at the end (other work on the machine skews every number)\n",
		res.LoadBefore, res.LoadAfter)
	fmt.Fprintf(w, "engine    %s\n", res.Engine)
	fmt.Fprintf(w, "http/1.1  the gateway's cleartext server: %s (-http1)\n", res.HTTP1)
	fmt.Fprintf(w, "method    open loop at fixed rates, latency from each request's scheduled send (no coordinated\n"+
		"          omission); %s per run after a %s closed-loop warm-up; saturation = closed loop with %d\n"+
		"          HTTP/1.1 connections; every response has %d tokens; added = layer0 minus direct\n",
		o.duration, o.warmup, o.conns, streamTokens)
	for _, sc := range res.Scenarios {
		fmt.Fprintf(w, "\n== %s ==\n", sc.Name)
		fmt.Fprintf(w, "%-11s %10s %10s  %10s %10s  %10s %10s  %s\n", "rate", "direct p50", "p99",
			"layer0 p50", "p99", "added p50", "p99", "notes")
		for _, p := range sc.Fixed {
			fmt.Fprintf(w, "%-11s %10s %10s  %10s %10s  %10s %10s  %s\n", fmt.Sprintf("%g/s", p.Rate),
				latency(p.Direct, false), latency(p.Direct, true), latency(p.Layer0, false), latency(p.Layer0, true),
				added(p, false), added(p, true), notes(p))
		}
		for _, p := range sc.Fixed {
			if x := p.Proxy; x != nil && x.OK > 0 && p.Direct.OK > 0 {
				fmt.Fprintf(w, "%-11s bare proxy p50 %s, p99 %s: adds %s at p50 and %s at p99  %s\n", fmt.Sprintf("%g/s", p.Rate),
					dur(x.Latency.P50), dur(x.Latency.P99), signed(x.Latency.P50-p.Direct.Latency.P50),
					signed(x.Latency.P99-p.Direct.Latency.P99), errNote("bare proxy", x))
			}
		}
		s := sc.Saturation
		fmt.Fprintf(w, "saturation  direct %.0f req/s (p50 %s), layer0 %.0f req/s (p50 %s): %.0f%% of direct  %s\n",
			s.Direct.Throughput, dur(s.Direct.Latency.P50), s.Layer0.Throughput, dur(s.Layer0.Latency.P50),
			100*s.share(), notes(s))
		if x := s.Proxy; x != nil && s.Direct.Throughput > 0 {
			cpu := ""
			if s.ProxyCPU != nil {
				cpu = fmt.Sprintf(", %s of CPU per request in the proxy", dur(s.ProxyCPU.Layer0))
			}
			fmt.Fprintf(w, "            bare proxy %.0f req/s (p50 %s): %.0f%% of direct%s  %s\n", x.Throughput,
				dur(x.Latency.P50), 100*x.Throughput/s.Direct.Throughput, cpu, errNote("bare proxy", x))
		}
		if d, l := s.DirectCPU, s.Layer0CPU; d != nil && l != nil {
			fmt.Fprintf(w, "CPU/request direct: generator %s + upstream %s; through layer0: generator %s + upstream %s + layer0 %s (profiled)\n",
				dur(d.Generator), dur(d.Upstream), dur(l.Generator), dur(l.Upstream), dur(l.Layer0))
		}
		fmt.Fprintf(w, "bytes/token direct %.1f, layer0 %.1f\n", s.Direct.BytesPerToken, s.Layer0.BytesPerToken)
		if sc.Profile != "" {
			fmt.Fprintf(w, "layer0 CPU profile at saturation (%s):\n", cmp.Or(sc.ProfileFile, "not saved"))
			for _, l := range profileLines(sc.Profile, 18) {
				fmt.Fprintf(w, "    %s\n", l)
			}
		}
	}
	printOneConn(w, o, res.OneConn)
	if st := res.Streams; st != nil {
		r := st.Report
		fmt.Fprintf(w, "\n== %d concurrent streams through layer0 (h2c, %d tokens %s apart) ==\n",
			st.Want, slowTokens, slowInterTokenDelay)
		fmt.Fprintf(w, "held %d at once, %d ok, %d failed; layer0 RSS %s idle, %s peak  %s\n",
			r.PeakInFlight, r.OK, r.Failed, mib(st.IdleRSS), mib(st.PeakRSS), errNote("layer0", r))
		fmt.Fprintf(w, "stream duration p50 %s, p99 %s (the upstream alone: %s); time to first token p50 %s, p99 %s\n",
			dur(r.Latency.P50), dur(r.Latency.P99), dur((slowTokens-1)*slowInterTokenDelay), dur(r.TTFT.P50), dur(r.TTFT.P99))
	}
	printProtocols(w, res.Protocols)
	printTargets(w, res)
}

// printTargets checks the targets.
func printTargets(w io.Writer, res *result) {
	fmt.Fprintf(w, "\n== targets (2-core machine) ==\n")
	check := func(ok bool, format string, args ...any) {
		mark := "MISS"
		if ok {
			mark = " ok "
		}
		fmt.Fprintf(w, "[%s] %s\n", mark, fmt.Sprintf(format, args...))
	}
	clean := func(p pair) bool { return p.Direct.Failed == 0 && p.Layer0.Failed == 0 && p.Layer0.OK > 0 }
	if len(res.Scenarios) > 0 {
		js := res.Scenarios[0]
		if len(js.Fixed) > 0 {
			// The target's rate, or the highest measured.
			p := slices.MaxFunc(js.Fixed, func(a, b pair) int { return cmp.Compare(a.Rate, b.Rate) })
			if i := slices.IndexFunc(js.Fixed, func(q pair) bool { return q.Rate == targetAddedRate }); i >= 0 {
				p = js.Fixed[i]
			}
			check(clean(p) && p.added(false) <= targetAddedP50 && p.added(true) <= targetAddedP99,
				"non-streaming at %g req/s: layer0 adds %s at p50 (target ≤ %s) and %s at p99 (target ≤ %s)%s",
				p.Rate, added(p, false), dur(targetAddedP50), added(p, true), dur(targetAddedP99), failNote(p))
		}
		s := js.Saturation
		check(clean(s) && s.share() >= targetJSONShare, "non-streaming maximum throughput: %.0f%% of direct (target ≥ %.0f%%)%s%s",
			100*s.share(), 100*targetJSONShare, failNote(s), budgetNote(s, targetJSONShare))
	}
	for _, sc := range res.Scenarios[min(1, len(res.Scenarios)):] {
		s := sc.Saturation
		check(clean(s) && s.share() >= targetStreamShare, "%s maximum throughput: %.0f%% of direct (target ≥ %.0f%%)%s%s",
			sc.Name, 100*s.share(), 100*targetStreamShare, failNote(s), budgetNote(s, targetStreamShare))
		if len(sc.Fixed) > 0 {
			p := sc.Fixed[0]
			check(clean(p) && p.added(false) <= targetStreamGain,
				"%s at %g req/s: a stream ends %s later through layer0 at p50 (target ≤ %s)%s",
				sc.Name, p.Rate, added(p, false), dur(targetStreamGain), failNote(p))
		}
	}
	checkOneConn(check, res.OneConn)
	for _, r := range res.Protocols {
		h2, h3 := r.run("2"), r.run("3")
		if h2 == nil || h3 == nil {
			continue
		}
		q := r.h3Ratio(false)
		_, f2, _ := h2.sums()
		_, f3, _ := h3.sums()
		fail := ""
		if f2+f3 > 0 {
			fail = fmt.Sprintf(" — requests failed: HTTP/2 %d, HTTP/3 %d", f2, f3)
		}
		check(f2+f3 == 0 && q > 0 && q <= 1+targetH3TTFT,
			"%s at %g req/s: HTTP/3's time to first token is %.2f× HTTP/2's at p50, %s against %s (target ≤ %.2f×)%s",
			r.Name, r.Rate, q, durOrNA(h3.ttft(false)), durOrNA(h2.ttft(false)), 1+targetH3TTFT, fail)
	}
	if st := res.Streams; st != nil {
		check(st.Report.Failed == 0 && st.Report.PeakInFlight >= int64(st.Want) && st.PeakRSS < targetStreamsRSS,
			"%d concurrent streams held with %s peak RSS (target: %d streams under %s)",
			st.Report.PeakInFlight, mib(st.PeakRSS), st.Want, mib(targetStreamsRSS))
	}
}

// budgetNote compares layer0's CPU per request with what the throughput target allows.
func budgetNote(p pair, share float64) string {
	if p.Layer0CPU == nil || p.DirectCPU == nil {
		return ""
	}
	return fmt.Sprintf("\n       layer0 used %s of CPU per request; %.0f%% of direct needs at most %s here, if the generator\n"+
		"       and upstream cost what they did in the direct run (they cost more at lower rates)",
		dur(p.Layer0CPU.Layer0), 100*share, dur(p.budget(share)))
}

// failNote says that a target cannot be judged because requests failed.
func failNote(p pair) string {
	if p.Direct.Failed == 0 && p.Layer0.Failed == 0 {
		return ""
	}
	return fmt.Sprintf(" — requests failed: direct %d, layer0 %d of %d", p.Direct.Failed, p.Layer0.Failed, p.Layer0.Sent)
}

// notes flags failures and generator lateness of a pair.
func notes(p pair) string {
	var parts []string
	for _, s := range []string{errNote("direct", p.Direct), errNote("layer0", p.Layer0),
		lateNote("direct", p.Direct), lateNote("layer0", p.Layer0)} {
		if s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, "; ")
}

// latency is a run's p50 or p99, or n/a when no request succeeded.
func latency(r *bench.Report, p99 bool) string {
	switch {
	case r.OK == 0:
		return "n/a"
	case p99:
		return dur(r.Latency.P99)
	}
	return dur(r.Latency.P50)
}

// added is layer0's added p50 or p99, or n/a.
func added(p pair, p99 bool) string {
	if p.Direct.OK == 0 || p.Layer0.OK == 0 {
		return "n/a"
	}
	return signed(p.added(p99))
}

func errNote(who string, r *bench.Report) string {
	if r.Failed == 0 {
		return ""
	}
	kinds := make([]string, 0, len(r.Errors))
	for k := range r.Errors {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(a, b string) int { return cmp.Compare(r.Errors[b], r.Errors[a]) })
	top := kinds[0]
	sample := r.ErrorSamples[top]
	if len(sample) > 80 {
		sample = sample[:80] + "…"
	}
	return fmt.Sprintf("%s: %d of %d failed, mostly %s (%s)", who, r.Failed, r.Sent, top, sample)
}

func lateNote(who string, r *bench.Report) string {
	if r.Mode != "open" || r.Sent == 0 || float64(r.Late) < 0.01*float64(r.Sent) {
		return ""
	}
	return fmt.Sprintf("%s: generator sent %.0f%% late", who, 100*float64(r.Late)/float64(r.Sent))
}

// profileLines keeps the header and the first n function lines of a pprof -top listing.
func profileLines(top string, n int) []string {
	var out []string
	fns := 0
	for _, l := range strings.Split(strings.TrimRight(top, "\n"), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "flat") || fns > 0 {
			fns++
		}
		if strings.HasPrefix(l, "File:") || strings.HasPrefix(l, "Build ID:") || strings.HasPrefix(l, "Type:") ||
			strings.HasPrefix(l, "Time:") {
			continue
		}
		if fns > n+1 {
			break
		}
		out = append(out, l)
	}
	return out
}

// dur prints a duration with three significant digits.
func dur(d time.Duration) string { return bench.FormatDuration(d) }

func signed(d time.Duration) string {
	if d > 0 {
		return "+" + dur(d)
	}
	return dur(d)
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
