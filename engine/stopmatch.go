package engine

import (
	"slices"
	"sort"
)

// StopMatcher finds stop strings in generated text as it grows, looking at each new byte
// once: an Aho–Corasick automaton over the stop strings' bytes. Matching a token costs
// amortised O(its bytes) whatever the number and length of the stop strings (each byte
// moves one edge down the trie and at most as many failure links up as edges it went
// down); building it costs O(total bytes of the stop strings). A StopState per sequence
// carries the position in the automaton from token to token.
//
// Re-decoding the whole output and searching every stop string after every token, as
// the sampler once did, is quadratic in the output and linear in the stop strings per
// token: one request with 20,000 stop strings held a model for minutes.
type StopMatcher struct {
	// The trie, states numbered from 0 (the root); state s's edges are
	// edgeByte/edgeTo[edgeStart[s]:edgeStart[s+1]], sorted by byte.
	edgeStart []int32
	edgeByte  []byte
	edgeTo    []int32
	fail      []int32 // the longest proper suffix of s's string that is a trie state
	match     []bool  // s's string ends with a stop string
}

// StopState is a sequence's position in a StopMatcher (the zero value is the start).
type StopState int32

// NewStopMatcher builds the automaton for the given stop strings (empty strings are
// ignored). It returns nil when there is nothing to match.
func NewStopMatcher(stops []string) *StopMatcher {
	pats := make([]string, 0, len(stops))
	for _, s := range stops {
		if s != "" {
			pats = append(pats, s)
		}
	}
	if len(pats) == 0 {
		return nil
	}
	sort.Strings(pats)
	pats = slices.Compact(pats)
	// Build the trie from the sorted strings in one pass: each string shares its prefix
	// with the previous one, so only the path below the common prefix is new. path[i] is
	// the state of the previous string's first i bytes.
	type edge struct {
		from, to int32
		b        byte
	}
	var edges []edge
	terminal := []bool{false}
	path := []int32{0}
	prev := ""
	for _, s := range pats {
		common := 0
		for common < len(prev) && common < len(s) && prev[common] == s[common] {
			common++
		}
		path = path[:common+1]
		for i := common; i < len(s); i++ {
			st := int32(len(terminal))
			terminal = append(terminal, false)
			edges = append(edges, edge{from: path[i], to: st, b: s[i]})
			path = append(path, st)
		}
		terminal[path[len(s)]] = true
		prev = s
	}
	n := len(terminal)
	m := &StopMatcher{edgeStart: make([]int32, n+1), edgeByte: make([]byte, len(edges)), edgeTo: make([]int32, len(edges)),
		fail: make([]int32, n), match: terminal}
	// Counting sort of the edges by their source state; a state's edges were created in
	// increasing byte order (the strings are sorted), so they stay sorted by byte.
	for _, e := range edges {
		m.edgeStart[e.from+1]++
	}
	for s := 1; s <= n; s++ {
		m.edgeStart[s] += m.edgeStart[s-1]
	}
	fill := append([]int32(nil), m.edgeStart[:n]...)
	for _, e := range edges {
		m.edgeByte[fill[e.from]], m.edgeTo[fill[e.from]] = e.b, e.to
		fill[e.from]++
	}
	// Failure links in breadth-first order, so a state's link is known before its
	// children's; match spreads along them (a state matches if a suffix of it does).
	queue := make([]int32, 0, n)
	for i := m.edgeStart[0]; i < m.edgeStart[1]; i++ {
		queue = append(queue, m.edgeTo[i]) // depth 1: fail to the root
	}
	for q := 0; q < len(queue); q++ {
		s := queue[q]
		for i := m.edgeStart[s]; i < m.edgeStart[s+1]; i++ {
			child, b := m.edgeTo[i], m.edgeByte[i]
			f := m.fail[s]
			for {
				if t, ok := m.next(f, b); ok {
					m.fail[child] = t
					break
				}
				if f == 0 {
					m.fail[child] = 0
					break
				}
				f = m.fail[f]
			}
			m.match[child] = m.match[child] || m.match[m.fail[child]]
			queue = append(queue, child)
		}
	}
	return m
}

// next follows s's edge labelled b, if it has one.
func (m *StopMatcher) next(s int32, b byte) (int32, bool) {
	lo, hi := int(m.edgeStart[s]), int(m.edgeStart[s+1])
	for lo < hi {
		mid := (lo + hi) / 2
		switch c := m.edgeByte[mid]; {
		case c == b:
			return m.edgeTo[mid], true
		case c < b:
			lo = mid + 1
		default:
			hi = mid
		}
	}
	return 0, false
}

// Feed advances st over the new bytes text and reports whether a stop string ends
// within them (the text so far, including text, contains a stop string that it did not
// contain before).
func (m *StopMatcher) Feed(st StopState, text string) (StopState, bool) {
	st, hit, _ := m.feed(st, text)
	return st, hit
}

// feed is Feed that also counts the edge lookups it made (for the test of its bound).
func (m *StopMatcher) feed(st StopState, text string) (StopState, bool, int) {
	s := int32(st)
	hit := false
	steps := 0
	for i := 0; i < len(text); i++ {
		b := text[i]
		for {
			steps++
			if t, ok := m.next(s, b); ok {
				s = t
				break
			}
			if s == 0 {
				break
			}
			s = m.fail[s]
		}
		hit = hit || m.match[s]
	}
	return StopState(s), hit, steps
}

// States is the automaton's size (its memory is about 13 bytes per state).
func (m *StopMatcher) States() int { return len(m.fail) }
