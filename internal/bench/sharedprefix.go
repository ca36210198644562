package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/sse"
)

// SharedPrefixConfig describes a run of the shared-prefix workload: groups of users whose
// requests share a long system prompt per group, each user holding a conversation that grows by
// one exchange per request for Turns requests and then starts over. It measures what the
// placement of requests on a pool of engines with prefix caches does to the time to first token,
// and how much of the prompts the engines served from their caches.
type SharedPrefixConfig struct {
	// URL is the server's base URL (http://host:port) or a full URL with a path, as Config.URL.
	URL string
	// Format is the client format: Anthropic (default) or OpenAI. Requests are always streamed.
	Format llm.Format
	// Models are the models requested. With one, every request asks for it; with several, group
	// g asks for Models[g mod len(Models)] — a placement by group, with one model per replica.
	// Default ["sim"].
	Models []string
	// APIKey, when set, is sent as x-api-key (Anthropic) or a Bearer token (OpenAI).
	APIKey string
	// Header holds extra request headers.
	Header http.Header
	// SessionHeader names the header each request carries its conversation's id in ("g3-u1-c0":
	// group, user, conversation), for session affinity. Default "x-session-id"; "-" sends none.
	SessionHeader string

	// Groups is how many groups of users there are, each with its own system prompt. Default 8.
	Groups int
	// UsersPerGroup is how many users each group has. Default 4.
	UsersPerGroup int
	// PrefixTokens is the length of each group's system prompt in tokens (about: one common word
	// is one token in the cl100k_base and similar vocabularies). Default 1000.
	PrefixTokens int
	// Turns is how many requests a conversation lasts: request k of a user's conversation
	// carries the k earlier questions and their answers (fixed texts, the same for every run,
	// so that every placement sees the same prompts). Default 1: every request a new question.
	Turns int
	// Skew is the share of requests sent by group 0, 0 to 1; the others are drawn evenly from
	// the other groups. 0 draws every group evenly. Default 0.
	Skew float64

	// Rate is the open-loop request rate per second, latencies measured from each request's
	// scheduled time; 0 selects closed loop with Connections workers.
	Rate float64
	// MaxInFlight bounds the open-loop requests in flight. Default 10000.
	MaxInFlight int
	// Connections is the number of closed-loop workers. Default 16.
	Connections int
	// Duration bounds the run as Config.Duration. Default 10s when Requests is 0.
	Duration time.Duration
	// Requests bounds the number of requests; 0 means only Duration bounds the run.
	Requests int
	// Timeout bounds each request from its send. Default 30s.
	Timeout time.Duration
	// MaxTokens is the requested max_tokens. Default 16.
	MaxTokens int
	// Seed seeds the draw of groups and users: the same seed sends the same requests in the same
	// order. Default 1.
	Seed uint64
}

// SharedPrefixReport is the result of a shared-prefix run. Durations are in nanoseconds in JSON.
type SharedPrefixReport struct {
	URL           string   `json:"url"`
	Format        string   `json:"format"`
	Models        []string `json:"models"`
	Mode          string   `json:"mode"`
	Rate          float64  `json:"rate,omitempty"`
	Connections   int      `json:"connections,omitempty"`
	Groups        int      `json:"groups"`
	UsersPerGroup int      `json:"users_per_group"`
	PrefixTokens  int      `json:"prefix_tokens"`
	Turns         int      `json:"turns"`
	Skew          float64  `json:"skew"`

	// Elapsed runs from the start to the last response's end.
	Elapsed time.Duration `json:"elapsed_ns"`
	Outcome
	// TTFT is scheduled send → first text delta; Latency scheduled send → end of the stream.
	TTFT    Percentiles `json:"ttft"`
	Latency Percentiles `json:"latency"`
	// PromptTokens are the successful requests' prompt tokens and CachedTokens the part the
	// engines report they read from their prefix caches (Anthropic cache_read_input_tokens,
	// OpenAI prompt_tokens_details.cached_tokens); CacheShare is their ratio.
	PromptTokens uint64  `json:"prompt_tokens"`
	CachedTokens uint64  `json:"cached_tokens"`
	CacheShare   float64 `json:"cache_share"`
	// Replicas counts successful requests by the replica that served them, as the response's
	// X-Layer0-Engine header names it ("?" when absent: a server other than layer0).
	Replicas map[string]uint64 `json:"replicas"`
}

func (c SharedPrefixConfig) withDefaults() (SharedPrefixConfig, error) {
	target, _, err := targetURL(c.URL, c.Format)
	if err != nil {
		return c, err
	}
	if c.Format != llm.FormatAnthropic && c.Format != llm.FormatOpenAI {
		return c, fmt.Errorf("bench: the shared-prefix workload speaks anthropic or openai, not %s", c.Format)
	}
	c.URL = target
	switch {
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return c, fmt.Errorf("bench: rate %v: want a positive number of requests per second", c.Rate)
	case math.IsNaN(c.Skew) || c.Skew < 0 || c.Skew > 1:
		return c, fmt.Errorf("bench: skew %v: want a share between 0 and 1", c.Skew)
	case c.Groups < 0, c.UsersPerGroup < 0, c.PrefixTokens < 0, c.Turns < 0, c.Duration < 0, c.Requests < 0,
		c.Timeout < 0, c.MaxInFlight < 0, c.Connections < 0, c.MaxTokens < 0:
		return c, errors.New("bench: durations and counts must not be negative")
	case c.Skew > 0 && c.Groups == 1:
		return c, errors.New("bench: skew needs more than one group")
	}
	if len(c.Models) == 0 {
		c.Models = []string{"sim"}
	}
	for _, m := range c.Models {
		if m == "" {
			return c, errors.New("bench: empty model name")
		}
	}
	c.Groups = cmp.Or(c.Groups, 8)
	c.UsersPerGroup = cmp.Or(c.UsersPerGroup, 4)
	c.PrefixTokens = cmp.Or(c.PrefixTokens, 1000)
	c.Turns = cmp.Or(c.Turns, 1)
	c.MaxInFlight = cmp.Or(c.MaxInFlight, 10000)
	c.Connections = cmp.Or(c.Connections, 16)
	c.MaxTokens = cmp.Or(c.MaxTokens, 16)
	c.SessionHeader = cmp.Or(c.SessionHeader, "x-session-id")
	if c.Duration == 0 && c.Requests == 0 {
		c.Duration = 10 * time.Second
	}
	c.Timeout = cmp.Or(c.Timeout, 30*time.Second)
	c.Seed = cmp.Or(c.Seed, 1)
	return c, nil
}

// prefixWords are common words, each one token in the cl100k_base vocabulary when preceded by a
// space: the system prompts are made of them, so their length in tokens is about their words.
var prefixWords = strings.Fields(`the of and to in is that for it as with was on be at by this had not are
but from or have an they which one you were all we her she there would their will when who him been
has more if no out so said what up its about than into them can only other new some could time these`)

// sharedPrefixPrompt is group g's system prompt: about tokens tokens, the same in every run.
func sharedPrefixPrompt(g, tokens int) string {
	var b strings.Builder
	head := "Group " + strconv.Itoa(g) + " house rules:"
	b.WriteString(head)
	rnd := rand.New(rand.NewPCG(uint64(g)+1, 0x5eed))
	for range max(tokens-5, 0) { // the head is about five tokens
		b.WriteByte(' ')
		b.WriteString(prefixWords[rnd.IntN(len(prefixWords))])
	}
	return b.String()
}

// spJob is one request of the workload.
type spJob struct {
	group, user, conv, turn int
	due                     time.Time // open loop: the scheduled send; closed loop: zero
}

// spDraw draws the workload's requests: the group (skewed or not), a user of it, and that
// user's next turn. The same seed draws the same requests.
type spDraw struct {
	rnd                  *rand.Rand
	groups, users, turns int
	skew                 float64
	asked                []int // requests drawn per user so far
}

func newSPDraw(c SharedPrefixConfig) *spDraw {
	return &spDraw{rnd: rand.New(rand.NewPCG(c.Seed, 0x5a7e)), groups: c.Groups, users: c.UsersPerGroup,
		turns: c.Turns, skew: c.Skew, asked: make([]int, c.Groups*c.UsersPerGroup)}
}

func (d *spDraw) next() spJob {
	g := d.rnd.IntN(d.groups)
	if d.skew > 0 {
		if d.rnd.Float64() < d.skew {
			g = 0
		} else {
			g = 1 + d.rnd.IntN(d.groups-1)
		}
	}
	u := d.rnd.IntN(d.users)
	n := d.asked[g*d.users+u]
	d.asked[g*d.users+u]++
	return spJob{group: g, user: u, conv: n / d.turns, turn: n % d.turns}
}

// spRunner runs one shared-prefix workload.
type spRunner struct {
	cfg     SharedPrefixConfig
	client  *http.Client
	systems []string
	start   time.Time

	mu       sync.Mutex
	ttft     Histogram
	latency  Histogram
	ok       uint64
	prompt   uint64
	cached   uint64
	replicas map[string]uint64
	errs     map[string]uint64
	samples  map[string]string
	lastEnd  time.Duration
	sent     atomic.Uint64
}

// RunSharedPrefix runs the shared-prefix workload against cfg.URL until cfg.Duration passes,
// cfg.Requests are sent or ctx ends, then waits for the requests in flight.
func RunSharedPrefix(ctx context.Context, cfg SharedPrefixConfig) (*SharedPrefixReport, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &spRunner{cfg: c, replicas: map[string]uint64{}, errs: map[string]uint64{}, samples: map[string]string{}}
	conns := c.Connections
	if c.Rate > 0 {
		conns = c.MaxInFlight
	}
	tr := &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: time.Minute,
		DisableCompression: true}
	defer tr.CloseIdleConnections()
	r.client = &http.Client{Transport: tr}
	for g := range c.Groups {
		r.systems = append(r.systems, sharedPrefixPrompt(g, c.PrefixTokens))
	}

	draw := newSPDraw(c)
	runCtx := ctx
	if c.Duration > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, c.Duration)
		defer cancel()
	}
	jobs := make(chan spJob)
	var wg sync.WaitGroup
	workers := c.Connections
	if c.Rate > 0 {
		workers = c.MaxInFlight
	}
	if c.Requests > 0 {
		workers = min(workers, c.Requests)
	}
	r.start = time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				r.do(ctx, j)
			}
		}()
	}
	var interval time.Duration
	if c.Rate > 0 {
		interval = time.Duration(float64(time.Second) / c.Rate)
	}
send:
	for i := 0; c.Requests == 0 || i < c.Requests; i++ {
		j := draw.next()
		if interval > 0 {
			j.due = r.start.Add(time.Duration(i) * interval)
			if d := time.Until(j.due); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-runCtx.Done():
					t.Stop()
					break send
				}
			}
		}
		select {
		case jobs <- j:
			r.sent.Add(1)
		case <-runCtx.Done():
			break send
		}
	}
	close(jobs)
	wg.Wait()
	return r.report(), nil
}

// body is the JSON of request j.
func (r *spRunner) body(j spJob) ([]byte, error) {
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	c := &r.cfg
	var msgs []message
	if c.Format == llm.FormatOpenAI {
		msgs = append(msgs, message{"system", r.systems[j.group]})
	}
	who := "user " + strconv.Itoa(j.user) + " of group " + strconv.Itoa(j.group) + ", conversation " + strconv.Itoa(j.conv)
	for k := range j.turn + 1 {
		msgs = append(msgs, message{"user", "I am " + who + ". Question " + strconv.Itoa(k) + ": what does the next rule say?"})
		if k < j.turn {
			msgs = append(msgs, message{"assistant", "Answer " + strconv.Itoa(k) + " to " + who + ": the rule says to keep going."})
		}
	}
	model := c.Models[j.group%len(c.Models)]
	if c.Format == llm.FormatOpenAI {
		return json.Marshal(struct {
			Model         string          `json:"model"`
			MaxTokens     int             `json:"max_tokens"`
			Stream        bool            `json:"stream"`
			StreamOptions map[string]bool `json:"stream_options"`
			Messages      []message       `json:"messages"`
		}{model, c.MaxTokens, true, map[string]bool{"include_usage": true}, msgs})
	}
	return json.Marshal(struct {
		Model     string    `json:"model"`
		MaxTokens int       `json:"max_tokens"`
		Stream    bool      `json:"stream"`
		System    string    `json:"system"`
		Messages  []message `json:"messages"`
	}{model, c.MaxTokens, true, r.systems[j.group], msgs})
}

// spResult is what one successful request measured.
type spResult struct {
	ttft, latency  time.Duration
	prompt, cached int
	replica        string
}

// do sends request j and records its outcome.
func (r *spRunner) do(ctx context.Context, j spJob) {
	start := j.due
	if start.IsZero() {
		start = time.Now()
	}
	res, kind, err := r.send(ctx, j, start)
	end := time.Since(r.start)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastEnd = max(r.lastEnd, end)
	if err != nil {
		r.errs[kind]++
		if _, ok := r.samples[kind]; !ok {
			r.samples[kind] = oneLine(err.Error(), 200)
		}
		return
	}
	r.ok++
	r.ttft.Record(res.ttft)
	r.latency.Record(res.latency)
	r.prompt += uint64(res.prompt)
	r.cached += uint64(res.cached)
	r.replicas[res.replica]++
}

// send runs one request; on failure it returns the error kind for the report.
func (r *spRunner) send(ctx context.Context, j spJob, start time.Time) (spResult, string, error) {
	c := &r.cfg
	body, err := r.body(j)
	if err != nil {
		return spResult{}, ErrProtocol.String(), err
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(body))
	if err != nil {
		return spResult{}, ErrTransport.String(), err
	}
	for k, vs := range c.Header {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	if c.SessionHeader != "-" {
		req.Header.Set(c.SessionHeader, "g"+strconv.Itoa(j.group)+"-u"+strconv.Itoa(j.user)+"-c"+strconv.Itoa(j.conv))
	}
	if c.APIKey != "" {
		if c.Format == llm.FormatOpenAI {
			req.Header.Set("Authorization", "Bearer "+c.APIKey)
		} else {
			req.Header.Set("X-Api-Key", c.APIKey)
			req.Header.Set("Anthropic-Version", "2023-06-01")
		}
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return spResult{}, failKind(ctx, ErrTransport), err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return spResult{}, "status_" + strconv.Itoa(resp.StatusCode), fmt.Errorf("status %d: %s", resp.StatusCode, msg)
	}
	res := spResult{replica: resp.Header.Get("X-Layer0-Engine")}
	if res.replica == "" {
		res.replica = "?"
	}
	done, err := readUsageStream(resp.Body, c.Format, func() {
		if res.ttft == 0 {
			res.ttft = time.Since(start)
		}
	}, &res.prompt, &res.cached)
	if err != nil {
		return spResult{}, failKind(ctx, ErrTruncated), err
	}
	if !done {
		return spResult{}, ErrTruncated.String(), errors.New("the stream ended before its end marker")
	}
	res.latency = time.Since(start)
	if res.ttft == 0 {
		res.ttft = res.latency // no text: the answer's end is its first token
	}
	return res, "", nil
}

// failKind is kind, or the timeout or cancellation that caused it.
func failKind(ctx context.Context, kind ErrorKind) string {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return ErrTimeout.String()
	case ctx.Err() != nil:
		return ErrCanceled.String()
	}
	return kind.String()
}

// spEvent is the part of an SSE data line of either format that the workload reads.
type spEvent struct {
	Type  string `json:"type"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
	// Anthropic.
	Message struct {
		Usage *spUsage `json:"usage"`
	} `json:"message"`
	Delta struct {
		Text string `json:"text"`
	} `json:"delta"`
	Usage *spUsage `json:"usage"`
	// OpenAI.
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
}

type spUsage struct {
	InputTokens   int `json:"input_tokens"`
	CacheRead     int `json:"cache_read_input_tokens"`
	PromptTokens  int `json:"prompt_tokens"`
	PromptDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// readUsageStream reads an SSE stream of format f, calling first at each text delta and setting
// prompt and cached from the last usage seen: Anthropic's input_tokens do not count the cache
// reads, OpenAI's prompt_tokens do. It reports whether the format's end marker came.
func readUsageStream(body io.Reader, f llm.Format, first func(), prompt, cached *int) (bool, error) {
	er := sse.NewReader(body)
	er.Lenient = true
	done := false
	for {
		_, _, data, err := er.Next()
		if errors.Is(err, io.EOF) && len(data) == 0 {
			return done, nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return done, fmt.Errorf("reading the event stream: %w", err)
		}
		data = bytes.TrimSpace(data)
		if len(data) == 0 {
			continue // no data: a comment, or an event of its name only
		}
		if f == llm.FormatOpenAI && string(data) == "[DONE]" {
			done = true
			continue
		}
		var ev spEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			return false, fmt.Errorf("bad event %q: %w", oneLine(string(data), 80), err)
		}
		if ev.Error != nil || ev.Type == "error" {
			msg := "error event"
			if ev.Error != nil {
				msg = ev.Error.Message
			}
			return false, errors.New(msg)
		}
		u := ev.Usage
		if ev.Message.Usage != nil {
			u = ev.Message.Usage
		}
		if u != nil {
			if f == llm.FormatOpenAI {
				*prompt, *cached = u.PromptTokens, u.PromptDetails.CachedTokens
			} else {
				*prompt, *cached = u.InputTokens+u.CacheRead, u.CacheRead
			}
		}
		text := ev.Delta.Text != ""
		for _, ch := range ev.Choices {
			text = text || ch.Delta.Content != ""
		}
		if text {
			first()
		}
		if ev.Type == "message_stop" {
			done = true
		}
	}
}

func (r *spRunner) report() *SharedPrefixReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &r.cfg
	rep := &SharedPrefixReport{
		URL: c.URL, Format: c.Format.String(), Models: c.Models, Mode: "closed", Connections: c.Connections,
		Groups: c.Groups, UsersPerGroup: c.UsersPerGroup, PrefixTokens: c.PrefixTokens, Turns: c.Turns, Skew: c.Skew,
		Elapsed: r.lastEnd, Outcome: Outcome{Sent: r.sent.Load(), OK: r.ok},
		TTFT: percentiles(&r.ttft), Latency: percentiles(&r.latency),
		PromptTokens: r.prompt, CachedTokens: r.cached, Replicas: r.replicas,
	}
	if c.Rate > 0 {
		rep.Mode, rep.Rate, rep.Connections = "open", c.Rate, 0
	}
	if r.prompt > 0 {
		rep.CacheShare = float64(r.cached) / float64(r.prompt)
	}
	for k, n := range r.errs {
		rep.Failed += n
		if rep.Errors == nil {
			rep.Errors, rep.ErrorSamples = map[string]uint64{}, map[string]string{}
		}
		rep.Errors[k] = n
		rep.ErrorSamples[k] = r.samples[k]
	}
	return rep
}

// WriteText writes the report for a person.
func (r *SharedPrefixReport) WriteText(w io.Writer) error {
	var b strings.Builder
	load := fmt.Sprintf("closed loop, %d connections", r.Connections)
	if r.Mode == "open" {
		load = fmt.Sprintf("open loop, %g req/s", r.Rate)
	}
	fmt.Fprintf(&b, "shared-prefix workload against %s (%s, %s)\n", r.URL, r.Format, load)
	fmt.Fprintf(&b, "  %d groups × %d users, %d-token prefixes, %d turns per conversation, skew %g, models %s\n",
		r.Groups, r.UsersPerGroup, r.PrefixTokens, r.Turns, r.Skew, strings.Join(r.Models, ","))
	fmt.Fprintf(&b, "requests     %d sent, %d ok, %d failed in %s\n", r.Sent, r.OK, r.Failed, FormatDuration(r.Elapsed))
	for _, k := range sortedKeys(r.Errors) {
		fmt.Fprintf(&b, "  %-12s %d  %s\n", k, r.Errors[k], r.ErrorSamples[k])
	}
	fmt.Fprintf(&b, "ttft         p50 %s  p90 %s  p99 %s  max %s\n", FormatDuration(r.TTFT.P50), FormatDuration(r.TTFT.P90), FormatDuration(r.TTFT.P99), FormatDuration(r.TTFT.Max))
	fmt.Fprintf(&b, "latency      p50 %s  p90 %s  p99 %s\n", FormatDuration(r.Latency.P50), FormatDuration(r.Latency.P90), FormatDuration(r.Latency.P99))
	fmt.Fprintf(&b, "from cache   %.1f%% of prompt tokens (%d of %d)\n", 100*r.CacheShare, r.CachedTokens, r.PromptTokens)
	b.WriteString("per replica ")
	for _, k := range sortedKeys(r.Replicas) {
		fmt.Fprintf(&b, " %s %d", k, r.Replicas[k])
	}
	b.WriteByte('\n')
	_, err := io.WriteString(w, b.String())
	return err
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
