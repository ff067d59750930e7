package bpfunwind

import "sort"

// rowRange is a run of rows in the rows map: [first, first+n).
type rowRange struct{ first, n uint32 }

// rowAlloc hands out ranges of the rows map. The free ranges are kept
// sorted and merged with their neighbours when freed, so that rows freed
// by files next to each other serve a larger file later; a request is
// served from the first free range that holds it (first fit). Files are
// loaded whole and rarely, so nothing is ever moved: when no free range
// is large enough, the caller evicts more files.
type rowAlloc struct {
	total uint32
	free  []rowRange // sorted by first, none adjacent or overlapping
	inUse uint32
}

// newRowAlloc returns an allocator of total rows, all free.
func newRowAlloc(total uint32) *rowAlloc {
	a := &rowAlloc{total: total}
	if total > 0 {
		a.free = []rowRange{{0, total}}
	}
	return a
}

// alloc returns the first row of a free range of n rows (n > 0), and
// false when no free range is that large.
func (a *rowAlloc) alloc(n uint32) (uint32, bool) {
	if n == 0 {
		return 0, false
	}
	for i, r := range a.free {
		if r.n < n {
			continue
		}
		first := r.first
		if r.n == n {
			a.free = append(a.free[:i], a.free[i+1:]...)
		} else {
			a.free[i] = rowRange{r.first + n, r.n - n}
		}
		a.inUse += n
		return first, true
	}
	return 0, false
}

// release gives back n rows from first, as alloc handed them out, and
// merges them with the free ranges beside them.
func (a *rowAlloc) release(first, n uint32) {
	if n == 0 {
		return
	}
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].first > first })
	a.free = append(a.free, rowRange{})
	copy(a.free[i+1:], a.free[i:])
	a.free[i] = rowRange{first, n}
	a.inUse -= n
	// With the following range, then with the preceding one.
	if i+1 < len(a.free) && a.free[i].first+a.free[i].n == a.free[i+1].first {
		a.free[i].n += a.free[i+1].n
		a.free = append(a.free[:i+1], a.free[i+2:]...)
	}
	if i > 0 && a.free[i-1].first+a.free[i-1].n == a.free[i].first {
		a.free[i-1].n += a.free[i].n
		a.free = append(a.free[:i], a.free[i+1:]...)
	}
}

// largest is the size of the largest free range.
func (a *rowAlloc) largest() uint32 {
	var m uint32
	for _, r := range a.free {
		m = max(m, r.n)
	}
	return m
}
