package spend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/layer0ai/layer0/internal/store"
	"github.com/redis/go-redis/v9"
)

// Circuit is the shared store's view of Redis (store.Redis, which owns the client): whether
// Redis is reachable, and how many replicas are live; the ledger's scripts run on its connection.
type Circuit interface {
	// Script runs a script on the connection within the store's timeout. Its answer does not
	// end the store's run of failures: the ledger reports only its failures, with Fail.
	Script(ctx context.Context, sc *redis.Script, keys []string, args ...any) *redis.Cmd
	// Timeout is how long one round trip waits for Redis's answer.
	Timeout() time.Duration
	// Use reports whether to try Redis now; when not, the operation is counted as an error.
	Use() bool
	// Fail records an operation that failed; a lost connection marks Redis unreachable until a
	// probe answers.
	Fail(ctx context.Context, err error)
	// Divisor is what each limit is divided by while Redis is unreachable: the live replicas,
	// at least the configured floor.
	Divisor() int64
	// Lost reports Redis found without the state this replica wrote: every user of the store
	// writes back, and admissions wait for the census of the replicas' write-back.
	Lost(what string)
	// Settled waits until the replicas have written their state back after a loss or an
	// outage, at most until ctx ends.
	Settled(ctx context.Context) error
	// Keep registers k to be told of a loss, to write back (before this replica's heartbeat is
	// written again: the census counts it) and to renew, until forget is called.
	Keep(k store.Keeper) (forget func())
}

// errLedgerLost is an operation's error when Redis had lost the ledger: it changed nothing, and
// the replica writes its state back.
var errLedgerLost = errors.New("spend: redis: the ledger was lost (Redis restarted empty or was flushed); writing it back")

// ErrUnavailable is the error of a reservation while Redis is unreachable and the store is set
// to deny.
var ErrUnavailable = errors.New("spend: the shared store is unreachable")

// RedisConfig configures a Redis ledger.
type RedisConfig struct {
	// Circuit is the connection, shared with the rate limits' store: it runs the scripts, says
	// whether Redis is reachable, and the live replicas. Required; not closed here.
	Circuit Circuit
	// Deny refuses reservations (503) while Redis is unreachable, instead of spending this
	// replica's share of what was left.
	Deny bool
	// LeaseTTL is how long this replica's reservations outlive its last renewal (it renews every
	// third of it, at most every 250ms). Default 10s.
	LeaseTTL time.Duration
	// Prefix starts every key. Default "layer0:".
	Prefix string
	// ReplicaID names this replica's reservations. Default: the host name and a random suffix.
	ReplicaID string
	// Logger receives a line when this replica writes its reservations back. Default: discard.
	Logger *slog.Logger
}

// Redis is the Ledger shared by every replica on one Redis: each operation is one Lua script
// (one round trip) on all of a request's cells. Close it when done (the client stays open).
type Redis struct {
	c     RedisConfig
	ttlMS string
	every time.Duration
	me    string
	// meGuarded is me marked '!': the lease must be there (see guarded), built once.
	meGuarded string
	leases    string
	seq       atomic.Uint64

	// ops hold it shared; a write-back (restore) holds it alone, so that no reservation or
	// settlement runs while the replica's reservations are written again.
	ops sync.RWMutex

	mu      sync.Mutex
	seen    map[string]seenCell // each cell as Redis last answered: spending and reservations
	held    map[uint64]*holdRec // this replica's reservations outstanding
	pending []pendingSettle     // settlements to write once Redis answers
	local   *Memory             // what this replica spent of its share while Redis was unreachable
	// recent are this replica's reservations Redis admitted lately (within stale of the last
	// answer): what another replica's view of a cell may lack when Redis goes away.
	recent    []recentRes
	lastReply time.Time

	down      atomic.Bool  // Redis was found unreachable: write back before the next use
	lastLease atomic.Int64 // when the lease was last renewed (Unix ns)
	// restoredAt is when this replica last wrote its state back (Unix ns; 0: never).
	restoredAt atomic.Int64
	// losses counts the losses found (Stale): a reservation that waited (ready) before one and
	// would run after it waits again, since the write-back may have run in between and made the
	// lease that guards its script present again while the other replicas' are still to come.
	losses atomic.Uint64
	// beforeRun, when set (tests), runs after a reservation waited and before it runs.
	beforeRun func()

	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
	unkeep    func() // ends the store's calls to this ledger as a Keeper
}

type seenCell struct {
	c cell
	Use
}

type holdRec struct {
	cs    []charge
	local bool // taken from this replica's share while Redis was unreachable
}

type recentRes struct {
	at time.Time
	cs []charge
}

type pendingSettle struct {
	id     uint64
	cs     []charge
	actual []int64
}

// NewRedis returns a Redis ledger and starts renewing its lease.
func NewRedis(c RedisConfig) (*Redis, error) {
	if c.Circuit == nil {
		return nil, errors.New("spend: redis ledger: a circuit is required")
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 10 * time.Second
	}
	if c.Prefix == "" {
		c.Prefix = "layer0:"
	}
	if c.ReplicaID == "" {
		c.ReplicaID = store.NewReplicaID()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Redis{c: c, ttlMS: strconv.FormatInt(c.LeaseTTL.Milliseconds(), 10), every: min(250*time.Millisecond, c.LeaseTTL/3),
		me: strings.ReplaceAll(c.ReplicaID, "/", "_"), leases: c.Prefix + "{spend}/leases",
		seen: map[string]seenCell{}, held: map[uint64]*holdRec{}, local: NewMemory(), closed: make(chan struct{})}
	r.meGuarded = "!" + r.me
	r.unkeep = c.Circuit.Keep(keeper{r})
	r.wg.Add(1)
	go r.renewLoop()
	return r, nil
}

// Close stops renewing the lease: this replica's reservations still held expire with it.
func (r *Redis) Close() error {
	r.closeOnce.Do(func() {
		r.unkeep()
		close(r.closed)
	})
	r.wg.Wait()
	return nil
}

func (r *Redis) key(c cell) string { return r.c.Prefix + "{spend}/" + c.id }

func (r *Redis) keys(cs []charge) []string {
	ks := make([]string, 0, len(cs)+1)
	for _, ch := range cs {
		ks = append(ks, r.key(ch.c))
	}
	return append(ks, r.leases)
}

func (r *Redis) run(ctx context.Context, sc *redis.Script, keys []string, args ...any) ([]int64, error) {
	v, err := r.c.Circuit.Script(ctx, sc, keys, args...).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("spend: redis: %w", err)
	}
	return v, nil
}

func ms(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

func (r *Redis) reserve(ctx context.Context, cs []charge) (uint64, int, Use, error) {
	id := r.seq.Add(1)
	for range 3 {
		losses := r.losses.Load()
		if err := r.ready(ctx); err != nil {
			return 0, 0, Use{}, err
		}
		if !r.c.Circuit.Use() || r.down.Load() {
			// Unreachable, or reachable again but not yet written back (the write-back failed):
			// this replica's share, written back with the rest.
			return r.outage(id, cs)
		}
		got, refused, use, lost, err := r.reserveOnce(ctx, id, cs, losses)
		if !lost {
			return got, refused, use, err
		}
		// Redis lost the ledger: nothing was reserved; write back, wait, and ask again.
	}
	return r.outage(id, cs)
}

// reserveOnce runs the reservation's script; lost reports that Redis had lost the ledger (the
// script changed nothing, and the replica now writes back), or that a loss was found since the
// reservation waited (losses: the count then), when nothing was sent.
func (r *Redis) reserveOnce(ctx context.Context, id uint64, cs []charge, losses uint64) (uint64, int, Use, bool, error) {
	if r.beforeRun != nil {
		r.beforeRun()
	}
	args := []any{r.guarded(), id, r.ttlMS}
	for _, ch := range cs {
		args = append(args, ch.c.b.Limit, ch.amount, ch.c.bucket, ms(ch.c.ttl))
	}
	r.ops.RLock()
	if r.losses.Load() != losses { // the write-back cannot begin before RUnlock
		r.ops.RUnlock()
		return 0, 0, Use{}, true, nil
	}
	r.mu.Lock()
	r.held[id] = &holdRec{cs: cs} // before the script: one that times out may have run
	r.mu.Unlock()
	v, err := r.run(ctx, reserveScript, r.keys(cs), args...)
	r.ops.RUnlock()
	if err == nil && lostReply(v) {
		r.mu.Lock()
		delete(r.held, id)
		r.mu.Unlock()
		r.lost("a reservation")
		return 0, 0, Use{}, true, nil
	}
	if err != nil || len(v) != 3+2*len(cs) {
		if err == nil {
			err = fmt.Errorf("spend: redis: reserve answered %d values", len(v))
		}
		r.c.Circuit.Fail(ctx, err)
		r.forget(id, cs) // its reservation, if the script ran, is deleted by the next write
		if !r.c.Circuit.Use() && ctx.Err() == nil {
			got, refused, use, err := r.outage(id, cs)
			return got, refused, use, false, err
		}
		return 0, 0, Use{}, false, err
	}
	r.leased()
	r.observe(cs, v[3:])
	if v[0] == 1 {
		r.noteRecent(cs)
	}
	if v[0] == 0 {
		r.mu.Lock()
		delete(r.held, id)
		r.mu.Unlock()
		i := int(v[1]) - 1
		return 0, i, Use{Spent: v[3+2*i], Reserved: v[4+2*i]}, false, nil
	}
	return id, -1, Use{}, false, nil
}

// forget drops a reservation whose script failed: a settlement of 0 is queued, which deletes it
// from Redis if the script ran after all.
func (r *Redis) forget(id uint64, cs []charge) {
	r.mu.Lock()
	delete(r.held, id)
	r.pending = append(r.pending, pendingSettle{id: id, cs: cs, actual: make([]int64, len(cs))})
	r.mu.Unlock()
}

// stale bounds how old another replica's view of a cell may be when Redis goes away: each
// replica reads its cells at every renewal, which may take up to a timeout.
func (r *Redis) stale() time.Duration { return 2*r.every + r.c.Circuit.Timeout() }

// noteRecent remembers a reservation Redis admitted, for the shares of an outage.
func (r *Redis) noteRecent(cs []charge) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	i := 0
	for i < len(r.recent) && now.Sub(r.recent[i].at) > r.stale() {
		i++
	}
	r.recent = append(r.recent[i:], recentRes{at: now, cs: cs})
}

// outage reserves from this replica's share while Redis is unreachable: of what each budget had
// left as Redis last told this replica, a share for each of the D live replicas. Another
// replica's last view may lack what this one reserved since (at most stale before Redis went
// away); each replica's share is cut by D−1 times its own recent reservations, so that the
// shares together never pass what was left. A budget this replica never read has no share.
func (r *Redis) outage(id uint64, cs []charge) (uint64, int, Use, error) {
	if r.c.Deny {
		return 0, 0, Use{}, ErrUnavailable
	}
	r.down.Store(true)
	d := max(r.c.Circuit.Divisor(), 1)
	limits := make([]int64, len(cs))
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, ch := range cs {
		s, ok := r.seen[ch.c.id]
		if !ok {
			continue // no share
		}
		var recent int64
		for _, rr := range r.recent {
			if r.lastReply.Sub(rr.at) > r.stale() {
				continue
			}
			for _, c := range rr.cs {
				if c.c.id == ch.c.id {
					recent += c.amount
				}
			}
		}
		limits[i] = max(ch.c.b.Limit-s.Spent-s.Reserved-(d-1)*recent, 0) / d
	}
	_, refused, use, _ := r.local.reserveWithin(cs, limits)
	if refused >= 0 {
		s := r.seen[cs[refused].c.id]
		return 0, refused, Use{Spent: s.Spent + use.Spent, Reserved: s.Reserved + use.Reserved}, nil
	}
	r.held[id] = &holdRec{cs: cs, local: true}
	return id, -1, Use{}, nil
}

func (r *Redis) settle(ctx context.Context, id uint64, cs []charge, actual []int64) {
	r.mu.Lock()
	h := r.held[id]
	delete(r.held, id)
	if h != nil && h.local {
		r.local.settle(ctx, 0, cs, actual)
	}
	r.mu.Unlock()
	if h != nil && h.local || !r.c.Circuit.Use() || r.down.Load() {
		r.queue(id, cs, actual)
		return
	}
	// For a lease TTL after this replica wrote its state back, its settlements are written as
	// late ones (p, never absorbed): another replica's write-back, still to come, raises s to
	// what it saw before the loss, which would swallow a settlement added to s meanwhile.
	late := time.Since(time.Unix(0, r.restoredAt.Load())) < r.c.LeaseTTL
	r.ops.RLock()
	err := r.settleNow(ctx, id, cs, actual, late)
	r.ops.RUnlock()
	if err != nil {
		if !errors.Is(err, errLedgerLost) {
			r.c.Circuit.Fail(ctx, err)
		}
		r.queue(id, cs, actual) // a settlement kept is written later; one that ran twice is stricter
	}
}

func (r *Redis) queue(id uint64, cs []charge, actual []int64) {
	r.mu.Lock()
	r.pending = append(r.pending, pendingSettle{id: id, cs: cs, actual: actual})
	r.mu.Unlock()
}

func (r *Redis) settleNow(ctx context.Context, id uint64, cs []charge, actual []int64, late bool) error {
	flag := 0
	if late {
		flag = 1
	}
	me := r.guarded()
	if late {
		me = r.me // written back by restore, or after it: the lease is there or comes back with it
	}
	args := []any{me, id, r.ttlMS, flag}
	for i, ch := range cs {
		args = append(args, actual[i], ch.c.bucket, ms(ch.c.ttl))
	}
	v, err := r.run(ctx, settleScript, r.keys(cs), args...)
	if err != nil {
		return err
	}
	if lostReply(v) {
		// Redis lost the ledger: written late, after the write-back (never absorbed by a seed).
		r.lost("a settlement")
		return errLedgerLost
	}
	r.leased()
	if len(v) == 1+2*len(cs) {
		r.observe(cs, v[1:])
	}
	return nil
}

// observe notes each cell's state as Redis answered it: what this replica's share is cut from
// while Redis is unreachable, and what it writes back (never lowering) if Redis loses it.
func (r *Redis) observe(cs []charge, v []int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastReply = time.Now()
	for i, ch := range cs {
		// Replies of concurrent requests arrive in any order: the spending seen only grows, so
		// that an older answer never lowers what a write-back would restore.
		spent := v[2*i]
		if old, ok := r.seen[ch.c.id]; ok {
			spent = max(spent, old.Spent)
		}
		r.seen[ch.c.id] = seenCell{c: ch.c, Use: Use{Spent: spent, Reserved: v[2*i+1]}}
	}
}

func (r *Redis) used(ctx context.Context, cells []cell) ([]Use, error) {
	out := make([]Use, len(cells))
	if !r.c.Circuit.Use() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for i, c := range cells {
			out[i] = r.seen[c.id].Use
		}
		return out, nil
	}
	cs := make([]charge, len(cells))
	for i, c := range cells {
		cs[i] = charge{c: c}
	}
	args := []any{r.guarded(), 0, r.ttlMS}
	for _, ch := range cs {
		args = append(args, int64(1), int64(0), ch.c.bucket, ms(ch.c.ttl))
	}
	// A reservation of nothing never writes: reserve's arithmetic, read only.
	v, err := r.run(ctx, reserveScript, r.keys(cs), args...)
	if err == nil && lostReply(v) {
		r.lost("a read of the budgets")
		return nil, errLedgerLost
	}
	if err == nil && len(v) != 3+2*len(cs) {
		err = fmt.Errorf("spend: redis: read answered %d values", len(v))
	}
	if err != nil {
		r.c.Circuit.Fail(ctx, err)
		return nil, err
	}
	r.leased()
	r.observe(cs, v[3:])
	for i := range cells {
		out[i] = Use{Spent: v[3+2*i], Reserved: v[4+2*i]}
	}
	return out, nil
}
