package admission

import "container/list"

// The waiting requests of one pool: a band per priority, and in each band a FIFO per tenant
// served by deficit round robin (Shreedhar and Varghese, 1995).
//
// Why deficit round robin: every request costs one engine slot while it runs, and a slot is
// what the pool is short of, so each release is one unit of cost. A tenant's turn adds its
// weight to its deficit and releases requests while the deficit holds a whole unit; a tenant
// whose queue empties leaves the rotation and forfeits its deficit, so an idle tenant banks
// nothing, and the rotation holds only tenants with requests waiting: the pool's capacity goes
// to whoever is waiting (work-conserving), and among those who wait, in proportion to their
// weights, however many requests each has queued. A tenant sending ten times more requests
// queues ten times more, and waits longer, instead of making everyone else wait. Releases are
// O(1) amortised; fractional weights are allowed (a weight of 0.5 is released every other turn).

// waiter is one queued request. Its fields are guarded by the Queue's mutex.
type waiter struct {
	t      *tenant
	el     *list.Element // in t.q
	ready  chan struct{} // closed when the waiter is granted a slot or shed
	state  uint8
	bytes  int64
	err    error  // the client's error, when state is shed
	reason string // why it was shed
}

// Waiter states.
const (
	waiting uint8 = iota
	granted
	shed
)

// tenant is one tenant's FIFO within a band.
type tenant struct {
	name    string
	b       *band
	weight  float64
	deficit float64
	q       list.List // of *waiter, oldest first
	n       int
	active  bool // in the band's rotation
}

// band is one priority band's tenants.
type band struct {
	name      string
	priority  int
	sheddable bool
	share     float64 // the most of the pool's capacity the band may hold (0 or 1: all of it)
	inFlight  int     // the band's requests released and not ended
	tenants   map[string]*tenant
	ring      []*tenant // the active tenants, in rotation order
	cur       int       // the ring position whose turn it is
	n         int       // requests waiting in the band
}

func newBand(bd *Band) *band {
	b := &band{name: bd.Name, tenants: map[string]*tenant{}}
	b.set(bd)
	return b
}

// set applies the band's configuration (a reload may change it).
func (b *band) set(bd *Band) {
	b.priority, b.sheddable, b.share = bd.Priority, bd.Sheddable, bd.MaxShare
}

// limit is how many of capacity's slots the band may hold: its share, at least one.
func (b *band) limit(capacity int) int {
	if b.share <= 0 || b.share >= 1 {
		return capacity
	}
	return max(int(b.share*float64(capacity)), 1)
}

// tenant returns the band's tenant named name, made on first use, with its weight updated.
func (b *band) tenant(name string, weight float64) *tenant {
	t := b.tenants[name]
	if t == nil {
		t = &tenant{name: name, b: b}
		b.tenants[name] = t
	}
	t.weight = weight
	return t
}

// push queues w at the tail of t, putting t in the rotation if it was not.
func (b *band) push(t *tenant, w *waiter) {
	w.t = t
	w.el = t.q.PushBack(w)
	t.n++
	b.n++
	if !t.active {
		t.active = true
		t.deficit = 0
		b.ring = append(b.ring, t)
	}
}

// remove unlinks w from its tenant; a tenant left empty leaves the rotation and forfeits its
// deficit. Tenants with nothing queued are forgotten, so the map holds only tenants waiting.
func (b *band) remove(w *waiter) {
	t := w.t
	t.q.Remove(w.el)
	w.el = nil
	t.n--
	b.n--
	if t.n > 0 {
		return
	}
	t.active, t.deficit = false, 0
	for i, r := range b.ring {
		if r != t {
			continue
		}
		b.ring = append(b.ring[:i], b.ring[i+1:]...)
		if i < b.cur {
			b.cur--
		}
		if b.cur >= len(b.ring) {
			b.cur = 0
		}
		break
	}
	delete(b.tenants, t.name)
}

// pop removes and returns the next waiter by deficit round robin; the band must not be empty.
// Each pass over the ring adds every tenant's weight to its deficit, so the loop ends within
// ceil(1/smallest weight) passes.
func (b *band) pop() *waiter {
	for {
		t := b.ring[b.cur]
		if t.deficit < 1 {
			// The start of t's turn.
			t.deficit += t.weight
			if t.deficit < 1 {
				b.advance()
				continue
			}
		}
		w := t.q.Front().Value.(*waiter)
		t.deficit--
		b.remove(w) // moves the rotation on if t is now empty
		if t.active && t.deficit < 1 {
			b.advance()
		}
		return w
	}
}

func (b *band) advance() {
	if len(b.ring) > 0 {
		b.cur = (b.cur + 1) % len(b.ring)
	}
}

// ahead estimates how many of the band's waiters deficit round robin releases before one more
// request of t: all of t's own, and of each other tenant u, as many as u's weight earns while
// t's reach it — at most all u has queued.
func (b *band) ahead(t *tenant) int {
	n := t.n
	for _, u := range b.ring {
		if u == t {
			continue
		}
		share := int(float64(t.n+1)*u.weight/t.weight + 0.999)
		n += min(u.n, share)
	}
	return n
}

// heaviest is the tenant of b with the most requests queued, the one shedding takes from.
func (b *band) heaviest() *tenant {
	var h *tenant
	for _, t := range b.ring {
		if h == nil || t.n > h.n {
			h = t
		}
	}
	return h
}
