package unwindtable

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"unsafe"

	"github.com/rewindstack/rewind/internal/cachefile"
	"github.com/rewindstack/rewind/regs"
)

// tableMagic starts a marshalled table. Its last bytes version both the
// encoding and what Build computes: a change to either bumps it, and old
// files are then rebuilt rather than trusted.
const tableMagic = "RWUT0002"

var le = binary.LittleEndian

// MarshalBinary encodes the table (implementing
// encoding.BinaryMarshaler): fixed-width little-endian arrays, as they are
// held in memory, so decoding is a copy plus checks.
func (t *Table) MarshalBinary() ([]byte, error) {
	if t.lazy != nil {
		return t.lazy.snapshot().MarshalBinary()
	}
	b := []byte(tableMagic)
	b = append(b, byte(t.arch))
	if t.idx32 != nil {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = le.AppendUint64(b, t.base)
	b = le.AppendUint64(b, t.end)
	for _, n := range []int{len(t.pages), len(t.lo), len(t.rules), len(t.exprs),
		t.stats.FDEs, t.stats.BadFDEs, t.stats.SourceRows, t.stats.Unsupported, len(t.stats.FirstError)} {
		b = le.AppendUint32(b, uint32(n))
	}
	b = append(b, t.stats.FirstError...)
	b = pad4(b)
	for _, p := range t.pages {
		b = le.AppendUint32(b, p)
	}
	for _, v := range t.lo {
		b = le.AppendUint16(b, v)
	}
	b = pad4(b)
	for i := range t.lo {
		if t.idx32 != nil {
			b = le.AppendUint32(b, t.idx32[i])
		} else {
			b = le.AppendUint16(b, t.idx16[i])
		}
	}
	b = pad4(b)
	for _, r := range t.rules {
		b = append(b, byte(r.CFABase), r.CFAReg, byte(r.RAKind), byte(r.FPKind), r.RAReg, r.FPReg, r.Flags, 0)
		b = le.AppendUint32(b, uint32(r.CFAOffset))
		b = le.AppendUint32(b, uint32(r.RAOffset))
		b = le.AppendUint32(b, uint32(r.FPOffset))
	}
	for _, e := range t.exprs {
		b = le.AppendUint32(b, uint32(len(e)))
		b = append(b, e...)
	}
	return b, nil
}

// pad4 appends zeros up to a multiple of 4 bytes: the arrays of a table
// start 4-byte aligned in its file, so that a mapped file's arrays are
// used where they are (see view).
func pad4(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// errCorrupt is wrapped by every UnmarshalBinary error.
var errCorrupt = errors.New("unwindtable: corrupt table")

// reader takes fixed-size fields, recording the first error.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b)-r.off {
		r.err = fmt.Errorf("%w: %d bytes at offset %d run past the end (%d)", errCorrupt, n, r.off, len(r.b))
		return nil
	}
	p := r.b[r.off : r.off+n]
	r.off += n
	return p
}

// checkRuleIndexes checks that every row's rule index (idx, read at
// offset at) names one of nrules rules.
func checkRuleIndexes[T uint16 | uint32](idx []T, nrules, at int) error {
	size := int(unsafe.Sizeof(T(0)))
	for i, v := range idx {
		if uint64(v) >= uint64(nrules) {
			return fmt.Errorf("%w: row %d at offset %d names rule %d of %d", errCorrupt, i, at+size*i, v, nrules)
		}
	}
	return nil
}

// align skips the zeros pad4 wrote.
func (r *reader) align() {
	if n := (4 - r.off%4) % 4; n > 0 {
		for _, c := range r.take(n) {
			if c != 0 && r.err == nil {
				r.err = fmt.Errorf("%w: non-zero padding at offset %d", errCorrupt, r.off-n)
			}
		}
	}
}

func (r *reader) u32() uint32 {
	if p := r.take(4); p != nil {
		return le.Uint32(p)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if p := r.take(8); p != nil {
		return le.Uint64(p)
	}
	return 0
}

// UnmarshalBinary decodes a table written by MarshalBinary, checking every
// invariant Lookup and Rows rely on, so that a corrupt or hostile file
// gives an error (naming the offset) and never a table that panics. The
// table uses data's arrays where they are (see viewOf), so data must not
// change while the table is used: a cache file is mapped, read-only, and
// its rows then take no heap (16 MB of tables were live at the peak of
// the report of a 2.2 GB system-wide recording, copied).
func (t *Table) UnmarshalBinary(data []byte) error {
	r := &reader{b: data}
	if m := r.take(len(tableMagic)); r.err != nil || string(m) != tableMagic {
		return fmt.Errorf("%w: bad magic", errCorrupt)
	}
	hdr := r.take(2)
	if r.err != nil {
		return r.err
	}
	nt := Table{arch: regs.Arch(hdr[0])}
	wide := hdr[1] == 1
	if hdr[1] > 1 {
		return fmt.Errorf("%w: bad row-index width %d at offset %d", errCorrupt, hdr[1], len(tableMagic)+1)
	}
	nt.base, nt.end = r.u64(), r.u64()
	var n [9]int
	for i := range n {
		n[i] = int(r.u32())
	}
	npages, nrows, nrules, nexprs := n[0], n[1], n[2], n[3]
	nt.stats = Stats{FDEs: n[4], BadFDEs: n[5], SourceRows: n[6], Unsupported: n[7]}
	nt.stats.FirstError = string(r.take(n[8]))
	idxSize := 2
	if wide {
		idxSize = 4
	}
	// Check the counts against the bytes left before allocating.
	if r.err == nil && uint64(npages)*4+uint64(nrows)*uint64(2+idxSize)+uint64(nrules)*20+uint64(nexprs)*4 > uint64(len(data)-r.off) {
		return fmt.Errorf("%w: counts at offset %d exceed the data", errCorrupt, len(tableMagic)+18)
	}
	if r.err != nil {
		return r.err
	}
	if nt.end < nt.base || (nt.end-nt.base)>>40 != 0 {
		return fmt.Errorf("%w: bad range %#x..%#x", errCorrupt, nt.base, nt.end)
	}
	want := 2 // an empty table
	if nrows > 0 {
		want = int((nt.end-nt.base)>>pageBits) + 2
	}
	if npages != want {
		return fmt.Errorf("%w: %d page entries, want %d", errCorrupt, npages, want)
	}
	r.align()
	pagesAt := r.off
	nt.pages = arrayOf(r.take(4*npages), npages, le.Uint32)
	if r.err != nil {
		return r.err
	}
	for i, v := range nt.pages {
		if v > uint32(nrows) || i > 0 && v < nt.pages[i-1] {
			return fmt.Errorf("%w: page entry %d at offset %d out of order", errCorrupt, i, pagesAt+4*i)
		}
	}
	if nt.pages[0] != 0 || nt.pages[npages-1] != uint32(nrows) {
		return fmt.Errorf("%w: page index at offset %d does not span the rows", errCorrupt, pagesAt)
	}
	nt.lo = arrayOf(r.take(2*nrows), nrows, le.Uint16)
	r.align()
	idxAt := r.off
	ip := r.take(idxSize * nrows)
	if r.err != nil {
		return r.err
	}
	var err error
	if wide {
		nt.idx32 = arrayOf(ip, nrows, le.Uint32)
		err = checkRuleIndexes(nt.idx32, nrules, idxAt)
	} else {
		nt.idx16 = arrayOf(ip, nrows, le.Uint16)
		err = checkRuleIndexes(nt.idx16, nrules, idxAt)
	}
	if err != nil {
		return err
	}
	r.align()
	rp := r.take(20 * nrules)
	if r.err != nil {
		return r.err
	}
	if nt.rules = viewOf[Rule](rp, nrules); nt.rules == nil {
		nt.rules = make([]Rule, nrules)
		for i := range nt.rules {
			p := rp[20*i:]
			nt.rules[i] = Rule{CFABase: CFABase(p[0]), CFAReg: p[1], RAKind: RegKind(p[2]), FPKind: RegKind(p[3]),
				RAReg: p[4], FPReg: p[5], Flags: p[6],
				CFAOffset: int32(le.Uint32(p[8:])), RAOffset: int32(le.Uint32(p[12:])), FPOffset: int32(le.Uint32(p[16:]))}
		}
	}
	nt.exprs = make([][]byte, nexprs)
	for i := range nt.exprs {
		e := r.take(int(r.u32()))
		if r.err != nil {
			return r.err
		}
		nt.exprs[i] = e[:len(e):len(e)]
	}
	if r.err != nil {
		return r.err
	}
	if r.off != len(data) {
		return fmt.Errorf("%w: %d trailing bytes at offset %d", errCorrupt, len(data)-r.off, r.off)
	}
	nt.fillStats()
	*t = nt
	return nil
}

// persisted returns the file (relative to the cache directory) a Cache
// with Dir keeps key's table in, or "" when key does not name contents (a
// path-based key names no stable content). Keys that name contents are a
// build-id and a hash of the CFI the table is built from, as lowercase
// hex joined by '-'.
func (c *Cache) persisted(key string) string {
	if c.Dir == "" || len(key) < 3 || len(key) > 200 {
		return ""
	}
	for _, ch := range key {
		if !('0' <= ch && ch <= '9' || 'a' <= ch && ch <= 'f' || ch == '-') {
			return ""
		}
	}
	return "tables/" + key[:2] + "/" + key[2:] + "-" + tableMagic[4:]
}

// maxTableFile bounds a persisted table read back.
const maxTableFile = 1 << 30

// load reads a persisted table, checking its checksum against key; any
// error means "build it".
func load(dir, rel, key string) (*Table, error) {
	data, err := cachefile.Read(dir, rel, tableMagic+key, maxTableFile)
	if err != nil {
		return nil, err
	}
	t := &Table{}
	if err := t.UnmarshalBinary(data); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, rel), err)
	}
	return t, nil
}

// save writes t under rel (see cachefile.Write). Errors are only noted:
// persistence is an optimisation.
func save(dir, rel, key string, t *Table) error {
	b, err := t.MarshalBinary()
	if err != nil {
		return err
	}
	return cachefile.Write(dir, rel, tableMagic+key, b)
}
