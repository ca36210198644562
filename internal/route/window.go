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

// Fits reports whether an input of at most n tokens fits every context window name may be
// served with — every model of every fallback chain of every arm of a split — so that Plan
// would drop no model for its length whatever the exact count. A caller holding an upper
// bound on a prompt's tokens skips counting them when it fits. An unknown name fits nothing.
func (t *Table) Fits(name string, n int) bool {
	e := t.lookup(name)
	if e == nil {
		return false
	}
	if e.split == nil {
		return chainFits(e.model, n)
	}
	for _, m := range e.split.targets {
		if !chainFits(m, n) {
			return false
		}
	}
	return true
}

func chainFits(m *model, n int) bool {
	for _, cm := range m.chain {
		if cm.window > 0 && n > cm.window {
			return false
		}
	}
	return true
}
