package redistest

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Gate is a client hook (AddHook) that holds back the commands Match accepts while it is
// Armed: a test's way to make one replica's round trip late, or keep a replica from Redis for a
// while, without touching the server. The first command held closes Hit; every command held goes
// on when Open is closed, or when its context ends.
type Gate struct {
	Match func(redis.Cmder) bool
	Armed atomic.Bool
	Hit   chan struct{}
	Open  chan struct{}
	once  sync.Once
}

// NewGate returns a gate, not armed, for the commands match accepts.
func NewGate(match func(redis.Cmder) bool) *Gate {
	return &Gate{Match: match, Hit: make(chan struct{}), Open: make(chan struct{})}
}

// Script matches the runs of the script whose SHA1 is hash (EVALSHA).
func Script(hash string) func(redis.Cmder) bool {
	return func(c redis.Cmder) bool {
		a := c.Args()
		return len(a) > 1 && a[1] == hash
	}
}

// Any matches every command.
func Any(redis.Cmder) bool { return true }

func (g *Gate) hold(ctx context.Context, cmds ...redis.Cmder) {
	if !g.Armed.Load() {
		return
	}
	for _, c := range cmds {
		if g.Match(c) {
			g.once.Do(func() { close(g.Hit) })
			select {
			case <-g.Open:
			case <-ctx.Done():
			}
			return
		}
	}
}

// DialHook implements redis.Hook.
func (g *Gate) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (g *Gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		g.hold(ctx, cmd)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (g *Gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		g.hold(ctx, cmds...)
		return next(ctx, cmds)
	}
}
