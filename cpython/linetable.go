package cpython

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
	line := first
	end := 0 // code units covered so far
	i := 0
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
