package cpython

import "sort"

// The location table (co_linetable, CPython 3.11 and later) is a sequence
// of entries, each covering 1–8 code units. An entry's first byte has bit
// 7 set, its kind in bits 3–6 and its length-1 in bits 0–2; the bytes
// after it, up to the next byte with bit 7 set, hold the kind's data:
//
//	15      no location (the line is -1)
//	14      long form: signed varint line delta, then end line delta,
//	        column+1 and end column+1 as varints
//	13      no columns: signed varint line delta
//	10–12   one line: line delta kind-10, then two column bytes
//	0–9     short form: same line, one column byte
//
// Varints are 6 bits a byte, least significant first, bit 6 set when
// another byte follows; a signed varint keeps the sign in bit 0.

// Line returns the line of the instruction at code-unit index unit of a
// code object whose first line is first and location table is table, as
// PyCode_Addr2Line computes it: first for a negative index, -1 for an
// instruction with no location or beyond the table.
func Line(table []byte, first, unit int) int {
	if unit < 0 {
		return first
	}
	return scan(table, 0, 0, first, unit)
}

// scan decodes table from the entry at index i, which starts at code
// unit end with line (before its own delta), up to the entry holding
// unit: Line's loop, which an index starts part way.
func scan(table []byte, i, end, line, unit int) int {
	for i < len(table) {
		b := table[i]
		kind := (b >> 3) & 15
		n := int(b&7) + 1
		line += lineDelta(table, i, kind)
		start := end
		end += n
		if unit >= start && unit < end {
			if kind == 15 {
				return -1
			}
			return line
		}
		i++
		for i < len(table) && table[i]&128 == 0 {
			i++
		}
	}
	return -1
}

// markEvery is how many entries of a location table lie between two
// marks of its index: a lookup decodes at most that many.
const markEvery = 32

// lineIndex is a location table decoded once, for the many frames that
// run one code object: a mark every markEvery entries says where that
// entry starts (its byte, its first code unit, the line before its
// delta), so that a lookup decodes a few entries, not the table, and
// the index costs a few bytes per 32 entries beside the table.
type lineIndex struct {
	table []byte
	first int
	marks []lineMark
}

type lineMark struct {
	off, unit int
	line      int
}

// newLineIndex indexes table, of a code object whose first line is first.
func newLineIndex(table []byte, first int) *lineIndex {
	x := &lineIndex{table: table, first: first}
	line, end := first, 0
	for i, entries := 0, 0; i < len(table); entries++ {
		if entries%markEvery == 0 {
			x.marks = append(x.marks, lineMark{off: i, unit: end, line: line})
		}
		kind := (table[i] >> 3) & 15
		line += lineDelta(table, i, kind)
		end += int(table[i]&7) + 1
		i++
		for i < len(table) && table[i]&128 == 0 {
			i++
		}
	}
	return x
}

// line is Line(x.table, x.first, unit).
func (x *lineIndex) line(unit int) int {
	if unit < 0 {
		return x.first
	}
	// The last mark at or before unit: its entries hold unit if any do.
	k := sort.Search(len(x.marks), func(k int) bool { return x.marks[k].unit > unit }) - 1
	if k < 0 {
		return -1
	}
	m := x.marks[k]
	return scan(x.table, m.off, m.unit, m.line, unit)
}

// lineDelta is the line delta of the entry whose first byte is table[i].
func lineDelta(table []byte, i int, kind byte) int {
	switch kind {
	case 13, 14:
		v, _ := varint(table, i+1)
		if v&1 != 0 {
			return -int(v >> 1)
		}
		return int(v >> 1)
	case 11:
		return 1
	case 12:
		return 2
	}
	return 0
}

// varint reads an unsigned varint at table[i], bounded by the table and
// by 64 bits of value; it returns the value and the index after it.
func varint(table []byte, i int) (uint64, int) {
	var v uint64
	for shift := uint(0); i < len(table) && shift < 64; shift += 6 {
		b := table[i]
		i++
		v |= uint64(b&63) << shift
		if b&64 == 0 {
			break
		}
	}
	return v, i
}
