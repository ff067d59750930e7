package flamegraph

import (
	"hash/maphash"
	"math"
	"slices"
	"sort"
)

// tree is the merged call tree of a profile: every distinct stack prefix is
// one node, and a node's value is the weight of all samples passing through
// it. Node 0 is the synthetic root ("all").
type tree struct {
	names    []string  // node -> frame name (raw, untrusted)
	values   []int64   // node -> total weight, saturating
	parents  []int32   // node -> parent (-1 for the root)
	children [][]int32 // node -> children, sorted by name after build
	maxDepth int
}

// buildTree merges identical stack prefixes. Samples with a non-positive
// value are ignored; an empty stack counts towards the root only.
func buildTree(samples []Sample) *tree {
	t := &tree{names: []string{"all"}, values: []int64{0}, parents: []int32{-1}}

	// Sum the weights of samples with equal stacks (found by a hash of
	// the names, confirmed by comparing them), keeping the order of first
	// appearance, so the tree walk below runs once per distinct stack.
	type agg struct {
		stack []string
		value int64
		next  int32 // next distinct stack with the same hash, or -1
	}
	var uniq []agg
	seen := make(map[uint64]int32)
	seed := maphash.MakeSeed()
	for _, s := range samples {
		if s.Value <= 0 {
			continue
		}
		if len(s.Stack) == 0 {
			t.values[0] = satAdd(t.values[0], s.Value)
			continue
		}
		var h uint64 = 14695981039346656037
		for _, name := range s.Stack {
			h = (h ^ maphash.String(seed, name)) * 1099511628211
		}
		i, ok := seen[h]
		for ok && i >= 0 && !slices.Equal(uniq[i].stack, s.Stack) {
			i = uniq[i].next
		}
		if ok && i >= 0 {
			uniq[i].value = satAdd(uniq[i].value, s.Value)
			continue
		}
		head := int32(-1)
		if ok {
			head = seen[h]
		}
		seen[h] = int32(len(uniq))
		uniq = append(uniq, agg{s.Stack, s.Value, head})
	}

	// Frame names become small integers, so the child lookup is keyed by
	// two integers instead of a string.
	nameID := make(map[string]uint32)
	index := make(map[uint64]int32)
	for _, u := range uniq {
		t.values[0] = satAdd(t.values[0], u.value)
		cur := int32(0)
		for _, name := range u.stack {
			nid, ok := nameID[name]
			if !ok {
				nid = uint32(len(nameID))
				nameID[name] = nid
			}
			k := uint64(cur)<<32 | uint64(nid)
			id, ok := index[k]
			if !ok {
				id = int32(len(t.names))
				index[k] = id
				t.names = append(t.names, name)
				t.values = append(t.values, 0)
				t.parents = append(t.parents, cur)
			}
			t.values[id] = satAdd(t.values[id], u.value)
			cur = id
		}
		if len(u.stack) > t.maxDepth {
			t.maxDepth = len(u.stack)
		}
	}
	t.children = make([][]int32, len(t.names))
	for id := 1; id < len(t.names); id++ {
		p := t.parents[id]
		t.children[p] = append(t.children[p], int32(id))
	}
	for _, c := range t.children {
		if len(c) > 1 {
			sort.Slice(c, func(i, j int) bool { return t.names[c[i]] < t.names[c[j]] })
		}
	}
	return t
}

// frame is one rectangle of the flame graph: a node placed at a depth and
// an offset (in value units from the left edge).
type frame struct {
	node   int32
	depth  int
	offset int64
	value  int64
}

// layout is the list of frames to draw, in depth-first order (a frame's
// descendants follow it), plus what pruning removed.
type layout struct {
	frames       []frame
	total        int64
	maxDepth     int   // deepest drawn frame
	prunedFrames int   // nodes not drawn (including descendants of pruned nodes)
	prunedValue  int64 // weight of the outermost pruned nodes
	minValue     float64
}

// place lays the tree out left to right with children in name order and
// drops every node narrower than minValue together with its subtree.
func (t *tree) place(minValue float64) *layout {
	l := &layout{total: t.values[0], minValue: minValue}
	type item struct {
		node   int32
		depth  int
		offset int64
	}
	stack := []item{{0, 0, 0}}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		v := t.values[it.node]
		if it.node != 0 && float64(v) < minValue {
			l.prunedFrames += t.subtreeSize(it.node)
			l.prunedValue = satAdd(l.prunedValue, v)
			continue
		}
		l.frames = append(l.frames, frame{it.node, it.depth, it.offset, v})
		if it.depth > l.maxDepth {
			l.maxDepth = it.depth
		}
		kids := t.children[it.node]
		// Offsets left to right; push in reverse so the leftmost pops first.
		offs := make([]int64, len(kids))
		off := it.offset
		for i, k := range kids {
			offs[i] = off
			off = satAdd(off, t.values[k])
		}
		for i := len(kids) - 1; i >= 0; i-- {
			stack = append(stack, item{kids[i], it.depth + 1, offs[i]})
		}
	}
	return l
}

// subtreeSize counts n and all its descendants.
func (t *tree) subtreeSize(n int32) int {
	count := 0
	stack := []int32{n}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		count++
		stack = append(stack, t.children[x]...)
	}
	return count
}

// satAdd adds non-negative b to non-negative a without overflowing.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
