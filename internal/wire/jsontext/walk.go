package jsontext

// The request decoders of the client formats walk a body with a Walker. What differs between
// them on purpose stays with each: which member names are accepted, whether a name given twice is
// refused (Anthropic) or only noted (the OpenAI family), how a path is spelled
// ("messages.1.content" or "messages[1].content") and how an error is worded.

// Path is the place of the value being read: a stack of segments, pushed before a value and
// popped after it. On an error a decoder leaves it as it is, naming the value that failed. The
// first segments are held in place, so that the paths of a request cost no allocation; deeper
// ones (a schema nested further than any request's own members) grow a slice.
type Path struct {
	n    int
	near [12]PathSeg
	far  []PathSeg
}

// Enter pushes member key.
func (p *Path) Enter(key string) { p.push(PathSeg{Key: key, Index: -1}) }

// EnterIndex pushes array element i.
func (p *Path) EnterIndex(i int) { p.push(PathSeg{Index: i}) }

func (p *Path) push(sg PathSeg) {
	if p.n < len(p.near) {
		p.near[p.n] = sg
	} else {
		p.far = append(p.far[:p.n-len(p.near)], sg)
	}
	p.n++
}

// Leave pops the last segment.
func (p *Path) Leave() { p.n-- }

// Depth returns the number of segments: the nesting depth of the value being read.
func (p *Path) Depth() int { return p.n }

// Seg returns segment i, counted from the top level (i < Depth).
func (p *Path) Seg(i int) PathSeg {
	if i < len(p.near) {
		return p.near[i]
	}
	return p.far[i-len(p.near)]
}

// Segments appends the segments to dst, the top level first, and returns the result: a copy
// that outlives the reading on.
func (p *Path) Segments(dst []PathSeg) []PathSeg {
	dst = append(dst, p.near[:min(p.n, len(p.near))]...)
	if p.n > len(p.near) {
		dst = append(dst, p.far[:p.n-len(p.near)]...)
	}
	return dst
}

// Walker is a Scanner that keeps the Path of the value it reads: the walking skeleton of the
// hand-written request decoders. Its errors are the scanner's as they are, the path left where
// the error was met, so that each format names the field in its own words.
type Walker struct {
	Scanner
	Path
}

// Members reads the members of an object whose '{' was consumed, as Scanner.Members does (which
// it hides), entering each name while each reads its value (Members leaves after). It returns the
// first error, the scanner's or each's.
func (w *Walker) Members(each func(k string) error) error { return w.members(&w.Path, each) }

// Elems reads the elements of an array whose '[' was consumed: each reads one, its index
// entered (Elems leaves after). It returns the first error, the scanner's or each's.
func (w *Walker) Elems(each func() error) error {
	for n := 0; ; {
		ok, err := w.NextElem(&n)
		if err != nil || !ok {
			return err
		}
		w.EnterIndex(n - 1)
		if err := each(); err != nil {
			return err
		}
		w.Leave()
	}
}
