package conversation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/store"
)

// unavailable is the 503 of a shared store that cannot answer: the client may retry.
func unavailable(cause error) error {
	return &apierr.Error{Kind: apierr.Unavailable, Cause: cause, RetryAfter: time.Second,
		Message: "stored responses cannot be read now; retry shortly"}
}

// redisPrefix is the prefix of the keys stored responses take in Redis.
const redisPrefix = "layer0:response:"

// Redis is a Store in a Redis shared by every replica: one key per response, expiring after the
// TTL, so that a conversation continues on whichever replica its next request reaches. The
// owner check happens after the read, as for Memory.
type Redis struct {
	c       redis.UniversalClient
	ttl     time.Duration
	timeout time.Duration
}

// NewRedis returns a store on st's connection keeping each entry for ttl, each operation bounded
// by timeout (0 for none beyond the client's own).
func NewRedis(st *store.Redis, ttl, timeout time.Duration) *Redis {
	return &Redis{c: st.Client(), ttl: ttl, timeout: timeout}
}

func (s *Redis) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.timeout)
}

// Put implements Store.
func (s *Redis) Put(ctx context.Context, e *Entry) error {
	val, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("conversation: encode %s: %w", e.ID, err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := s.c.Set(ctx, redisPrefix+e.ID, val, s.ttl).Err(); err != nil {
		return fmt.Errorf("conversation: redis: store %s: %w", e.ID, err)
	}
	return nil
}

// Get implements Store.
func (s *Redis) Get(ctx context.Context, owner, id string) (*Entry, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	val, err := s.c.Get(ctx, redisPrefix+id).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, NotFound(id)
	}
	if err != nil {
		return nil, unavailable(fmt.Errorf("conversation: redis: read %s: %w", id, err))
	}
	e, err := decode(id, val)
	if err != nil {
		return nil, err
	}
	if e.Owner != owner {
		return nil, NotFound(id)
	}
	return e, nil
}

// Delete implements Store. The owner is checked on a read before the delete.
func (s *Redis) Delete(ctx context.Context, owner, id string) error {
	if _, err := s.Get(ctx, owner, id); err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	n, err := s.c.Del(ctx, redisPrefix+id).Result()
	if err != nil {
		return unavailable(fmt.Errorf("conversation: redis: delete %s: %w", id, err))
	}
	if n == 0 {
		return NotFound(id)
	}
	return nil
}
