package route

// Window returns the largest input, in tokens, that name can be served with whatever arm of a
// split is drawn: for a model, the largest context window of its fallback chain; for a split,
// the smallest of its arms' windows. 0 means no limit (a model of the chain has no window) or
// an unknown name. Context planning cuts an oversized input to it, so that Plan then finds a
// model that fits.
func (t *Table) Window(name string) int {
	e := t.lookup(name)
	if e == nil {
		return 0
	}
	if e.split == nil {
		return chainWindow(e.model)
	}
	w := 0
	for _, m := range e.split.targets {
		cw := chainWindow(m)
		if cw == 0 {
			continue
		}
		if w == 0 || cw < w {
			w = cw
		}
	}
	return w
}

// Windowed reports whether some model name may be served by — any arm of a split, any model of a
// fallback chain — has a context window: only then does Plan need the input's size.
func (t *Table) Windowed(name string) bool {
	e := t.lookup(name)
	if e == nil {
		return false
	}
	if e.split == nil {
		return anyWindow(e.model)
	}
	for _, m := range e.split.targets {
		if anyWindow(m) {
			return true
		}
	}
	return false
}

// FitsUncounted reports whether Plan treats every input of at most n tokens for name alike, so
// that a request known to be no larger need not be counted for routing: every context window
// name may be served with — each model of each fallback chain, of each arm of a split — holds n
// tokens, and no application picker (App), which is told the input, places any of them. It is
// false for an unknown name.
func (t *Table) FitsUncounted(name string, n int) bool {
	e := t.lookup(name)
	if e == nil {
		return false
	}
	if e.split == nil {
		return fitsUncounted(e.model, n)
	}
	for _, m := range e.split.targets {
		if !fitsUncounted(m, n) {
			return false
		}
	}
	return true
}

func fitsUncounted(m *model, n int) bool {
	for _, cm := range m.chain {
		if cm.window > 0 && n > cm.window {
			return false
		}
		if _, app := cm.picker.(App); app {
			return false
		}
	}
	return true
}

func anyWindow(m *model) bool {
	for _, cm := range m.chain {
		if cm.window > 0 {
			return true
		}
	}
	return false
}

// chainWindow is the largest window of m's fallback chain, 0 when one model has none.
func chainWindow(m *model) int {
	w := 0
	for _, cm := range m.chain {
		if cm.window == 0 {
			return 0
		}
		w = max(w, cm.window)
	}
	return w
}
