package symbolize

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/rewindstack/rewind/internal/cachefile"
	"github.com/rewindstack/rewind/internal/elfdata"
)

// The persistent cache keeps, per object, the DWARF index (unit address
// ranges, and per unit its line table and inline tree) in one file, so
// that the next run of rewind against the same binaries decodes only the
// units it looks into instead of decompressing and parsing the debug
// information again. NewPersistentCache indexes every unit at once
// (libc's debug file: 1937 units, a few hundred milliseconds, once);
// NewIncrementalCache, which dumps use, stores the units looked into so
// far and adds to them (libc: the dozen units of a dump's frames, read
// from a prefix of .debug_info in tens of milliseconds), so a dump
// whose frames are all in stored units reads no DWARF at all.
//
// The file is named by the object's build-id and a hash of the DWARF
// source's identity (see indexKey), so installing or upgrading a -dbg
// package makes a new file. Files are checksummed (package cachefile). Objects without a build-id are not
// persisted. A file that does not decode (truncated, foreign, an older
// format) is ignored and rewritten. Files are written to a temporary name
// and renamed, so concurrent runs never see a partial one.

// indexMagic starts every index file; its last bytes are the format
// version.
const indexMagic = "RWDWIX02" // 02: units not yet parsed may be left out

// maxIndexFile bounds an index file we read.
const maxIndexFile = 1 << 30

// NewPersistentCache returns a cache that also keeps DWARF indexes in
// files under dir (created on first write, mode 0700), read back by later
// runs; see package internal/cachefile for the checks every read and write
// makes (a directory of another user, or one others can write, is not
// used). Errors writing the files are ignored: the cache is an
// optimisation. Commands keep it in cachefile.Dir().
func NewPersistentCache(dir string) *Cache {
	c := NewCache()
	c.dir = dir
	return c
}

// NewIncrementalCache returns a persistent cache (see
// NewPersistentCache) whose DWARF indexes hold only the units that lookups
// looked into: the first run that meets a large debug file reads as
// little of it as its addresses need, instead of all of it, and later
// runs add the units they need. What a run parsed is written by Flush.
// Suited to dumps, which look up a few hundred addresses; a profile,
// which looks up thousands, is better served by NewPersistentCache.
func NewIncrementalCache(dir string) *Cache {
	c := NewPersistentCache(dir)
	c.incremental = true
	return c
}

// indexKey returns the cache file (relative to the cache directory) and
// the checksum key of the index of an object with build-id buildID whose
// DWARF comes from src. Besides the build-id — a claim the file makes
// about itself — the key names the very file the index was built from:
// its path, device, inode, size, modification and change times. The
// change time cannot be set back by an unprivileged user, so a file
// replaced or rewritten in place (even with the same size, build-id and
// modification time) gets a new index.
func indexKey(buildID, src string) (rel, key string) {
	h := sha256.New()
	fmt.Fprintf(h, "%s", indexMagic)
	cachefile.Identity(h, src)
	sum := hex.EncodeToString(h.Sum(nil)[:12])
	return "dwarf/" + buildID[:2] + "/" + buildID[2:] + "-" + sum, indexMagic + buildID + sum
}

// readIndex loads the index file rel of the cache in dir; units are
// decoded on first use.
func readIndex(dir, rel, key string) (*dwarfIndex, error) {
	data, err := cachefile.Read(dir, rel, key, maxIndexFile)
	if err != nil {
		return nil, err
	}
	ix, err := decodeIndex(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, rel), err)
	}
	return ix, nil
}

// writeIndex stores ix (all of whose units are built) as rel in dir.
func writeIndex(dir, rel, key string, ix *dwarfIndex) error {
	return cachefile.Write(dir, rel, key, ix.encode())
}

// buildAll parses every unit, in parallel: debug/dwarf supports
// concurrent Readers once each unit has been entered (it keeps a DWARF 5
// unit's base offsets from the first Seek into it), which one pass over
// the unit entries does first.
func (ix *dwarfIndex) buildAll() {
	ix.mu.Lock()
	src := ix.source()
	ix.mu.Unlock()
	if src == nil {
		return
	}
	d := src.all()
	if d == nil {
		return
	}
	_ = elfdata.Protect(func() error {
		r := d.Reader()
		for count := 0; count < ix.maxEntries; count++ {
			e, err := r.Next()
			if err != nil || e == nil {
				return nil
			}
			r.SkipChildren()
		}
		return nil
	})
	var wg sync.WaitGroup
	var built atomic.Int64
	next := make(chan int)
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A worker has its own memo of names: the index's is guarded
			// by a lock the workers need not share.
			wix := &dwarfIndex{src: src, alt: ix.alt, maxEntries: ix.maxEntries, names: map[nameKey]string{}}
			for ci := range next {
				slot := &ix.cus[ci]
				if slot.data.Load() != nil {
					continue
				}
				var cd *cuData
				if ix.stored != nil && ix.stored.has(ci) {
					cd = ix.stored.decodeCU(ci)
				} else {
					cd = &cuData{}
					if err := elfdata.Protect(func() error { return wix.buildCU(src, slot.off, cd) }); err != nil {
						cd = &cuData{}
					}
					built.Add(1)
				}
				slot.data.CompareAndSwap(nil, cd)
			}
		}()
	}
	for ci := range ix.cus {
		next <- ci
	}
	close(next)
	wg.Wait()
	ix.mu.Lock()
	ix.built += int(built.Load())
	ix.mu.Unlock()
}

// complete reports whether every unit is in the index (parsed, or held by
// the file it was read from).
func (ix *dwarfIndex) complete() bool {
	for ci := range ix.cus {
		if ix.cus[ci].data.Load() == nil && (ix.stored == nil || !ix.stored.has(ci)) {
			return false
		}
	}
	return true
}

// The encoding: the magic, then unsigned varints (signed ones zig-zag
// encoded):
//
//	strings:  count, then (length, bytes) each
//	units:    count, then (.debug_info offset of the unit's header, and
//	          offset, length of its record, relative to the start of the
//	          unit records) each; length 0: the unit is not in the file
//	          (it is parsed from DWARF when a lookup needs it)
//	ranges:   count, then (lo - previous lo, hi - lo, unit) each
//	unit records, each:
//	  files:  count, string index each
//	  lines:  count, then (addr - previous addr [signed], file [signed],
//	          line [signed]) each
//	  rngs:   count, then (lo, hi - lo) each
//	  nodes:  count, then (name, rOff, rN, end, callFile, callLine,
//	          inline) each
//	  funcs:  count, then (lo, hi - lo, node) each

type encoder struct {
	b    []byte
	strs map[string]uint64
	tab  []byte
	n    uint64
}

func (e *encoder) u(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) s(v int64)  { e.b = binary.AppendVarint(e.b, v) }

func (e *encoder) str(s string) {
	i, ok := e.strs[s]
	if !ok {
		i = e.n
		e.n++
		e.strs[s] = i
		e.tab = binary.AppendUvarint(e.tab, uint64(len(s)))
		e.tab = append(e.tab, s...)
	}
	e.u(i)
}

// encode serialises the index: the units parsed or decoded so far, and
// those the file it was read from holds.
func (ix *dwarfIndex) encode() []byte {
	e := &encoder{strs: map[string]uint64{}}
	var offs []uint64
	present := make([]bool, len(ix.cus))
	for i := range ix.cus {
		offs = append(offs, uint64(len(e.b)))
		cd := ix.cus[i].data.Load()
		if cd == nil && ix.stored != nil && ix.stored.has(i) {
			cd = ix.stored.decodeCU(i)
		}
		if cd == nil {
			continue
		}
		present[i] = true
		e.u(uint64(len(cd.files)))
		for _, f := range cd.files {
			e.str(f)
		}
		e.u(uint64(len(cd.lines)))
		prev := uint64(0)
		for _, l := range cd.lines {
			e.s(int64(l.addr - prev))
			e.s(int64(l.file))
			e.s(int64(l.line))
			prev = l.addr
		}
		e.u(uint64(len(cd.rngs)))
		for _, r := range cd.rngs {
			e.u(r[0])
			e.u(r[1] - r[0])
		}
		e.u(uint64(len(cd.nodes)))
		for _, n := range cd.nodes {
			e.str(n.name)
			e.u(uint64(n.rOff))
			e.u(uint64(n.rN))
			e.s(int64(n.end))
			e.s(int64(n.callFile))
			e.s(int64(n.callLine))
			if n.inline {
				e.u(1)
			} else {
				e.u(0)
			}
		}
		e.u(uint64(len(cd.funcs)))
		for _, f := range cd.funcs {
			e.u(f.lo)
			e.u(f.hi - f.lo)
			e.s(int64(f.node))
		}
	}
	records := e.b
	e.b = nil
	out := append([]byte(indexMagic), binary.AppendUvarint(nil, e.n)...)
	out = append(out, e.tab...)
	out = binary.AppendUvarint(out, uint64(len(ix.cus)))
	for i, o := range offs {
		end := uint64(len(records))
		if i+1 < len(offs) {
			end = offs[i+1]
		}
		if !present[i] {
			end = o
		}
		out = binary.AppendUvarint(out, ix.cus[i].off)
		out = binary.AppendUvarint(out, o)
		out = binary.AppendUvarint(out, end-o)
	}
	out = binary.AppendUvarint(out, uint64(len(ix.ranges)))
	prev := uint64(0)
	for _, r := range ix.ranges {
		out = binary.AppendUvarint(out, r.lo-prev)
		out = binary.AppendUvarint(out, r.hi-r.lo)
		out = binary.AppendUvarint(out, uint64(r.cu))
		prev = r.lo
	}
	return append(out, records...)
}

// storedIndex is the undecoded part of an index read from a file.
type storedIndex struct {
	data    []byte
	strOffs []uint32 // start of each string in data; its end is the next varint
	strLens []uint32
	recs    [][2]uint64 // unit records: offset into data, length
}

var errIndex = errors.New("corrupt index")

// decoder reads varints, recording the first error.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) u() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.err = fmt.Errorf("%w at offset %d", errIndex, d.off)
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) s() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.err = fmt.Errorf("%w at offset %d", errIndex, d.off)
		return 0
	}
	d.off += n
	return v
}

// count reads a count of items that take at least each bytes apiece.
func (d *decoder) count(each int) int {
	n := d.u()
	if d.err == nil && n > uint64(len(d.b)-d.off)/uint64(each) {
		d.err = fmt.Errorf("%w: count %d at offset %d exceeds the data", errIndex, n, d.off)
		return 0
	}
	return int(n)
}

// i32 reads a signed varint that must fit an int32.
func (d *decoder) i32() int32 {
	v := d.s()
	if v < -1<<31 || v > 1<<31-1 {
		d.err = fmt.Errorf("%w: value %d at offset %d", errIndex, v, d.off)
		return 0
	}
	return int32(v)
}

func decodeIndex(data []byte) (*dwarfIndex, error) {
	if len(data) < len(indexMagic) || string(data[:len(indexMagic)]) != indexMagic {
		return nil, fmt.Errorf("%w: bad magic", errIndex)
	}
	d := &decoder{b: data, off: len(indexMagic)}
	st := &storedIndex{data: data}
	n := d.count(1)
	st.strOffs = make([]uint32, n)
	st.strLens = make([]uint32, n)
	for i := 0; i < n && d.err == nil; i++ {
		l := d.u()
		if l > uint64(len(data)-d.off) {
			return nil, fmt.Errorf("%w: string at offset %d runs past the end", errIndex, d.off)
		}
		st.strOffs[i], st.strLens[i] = uint32(d.off), uint32(l)
		d.off += int(l)
	}
	ncu := d.count(3)
	ix := &dwarfIndex{stored: st, names: map[nameKey]string{}}
	ix.cus = make([]cuSlot, ncu)
	st.recs = make([][2]uint64, ncu)
	for i := 0; i < ncu && d.err == nil; i++ {
		ix.cus[i].off = d.u()
		st.recs[i] = [2]uint64{d.u(), d.u()}
	}
	nr := d.count(3)
	ix.ranges = make([]cuRange, nr)
	prev := uint64(0)
	for i := 0; i < nr && d.err == nil; i++ {
		lo := prev + d.u()
		hi := lo + d.u()
		cu := d.u()
		if cu >= uint64(ncu) || hi < lo {
			return nil, fmt.Errorf("%w: range %d at offset %d", errIndex, i, d.off)
		}
		ix.ranges[i] = cuRange{lo, hi, int32(cu)}
		prev = lo
	}
	if d.err != nil {
		return nil, d.err
	}
	base := uint64(d.off)
	for i, r := range st.recs {
		if r[0] > uint64(len(data))-base || r[1] > uint64(len(data))-base-r[0] {
			return nil, fmt.Errorf("%w: unit record %d out of bounds", errIndex, i)
		}
		st.recs[i][0] += base
	}
	ix.maxHi = prefixMax(len(ix.ranges), func(i int) uint64 { return ix.ranges[i].hi })
	return ix, nil
}

// has reports whether the file holds unit ci.
func (st *storedIndex) has(ci int) bool { return st.recs[ci][1] != 0 }

func (st *storedIndex) str(d *decoder) string {
	i := d.u()
	if d.err != nil || i >= uint64(len(st.strOffs)) {
		if d.err == nil {
			d.err = fmt.Errorf("%w: string index %d at offset %d", errIndex, i, d.off)
		}
		return ""
	}
	o := st.strOffs[i]
	return string(st.data[o : o+st.strLens[i]])
}

// decodeCU decodes unit ci's record; a corrupt record gives an empty unit.
func (st *storedIndex) decodeCU(ci int) *cuData {
	r := st.recs[ci]
	d := &decoder{b: st.data[:r[0]+r[1]], off: int(r[0])}
	cd := &cuData{}
	cd.files = make([]string, d.count(1))
	for i := range cd.files {
		cd.files[i] = st.str(d)
	}
	cd.lines = make([]lineRow, d.count(3))
	prev := uint64(0)
	for i := range cd.lines {
		addr := prev + uint64(d.s())
		cd.lines[i] = lineRow{addr: addr, file: d.i32(), line: d.i32()}
		prev = addr
	}
	cd.rngs = make([][2]uint64, d.count(2))
	for i := range cd.rngs {
		lo := d.u()
		cd.rngs[i] = [2]uint64{lo, lo + d.u()}
	}
	cd.nodes = make([]inlNode, d.count(7))
	for i := range cd.nodes {
		n := &cd.nodes[i]
		n.name = st.str(d)
		rOff, rN := d.u(), d.u()
		if rOff > uint64(len(cd.rngs)) || rN > uint64(len(cd.rngs))-rOff {
			return &cuData{}
		}
		n.rOff, n.rN = uint32(rOff), uint32(rN)
		n.end, n.callFile, n.callLine = d.i32(), d.i32(), d.i32()
		n.inline = d.u() != 0
	}
	cd.funcs = make([]funcRange, d.count(3))
	for i := range cd.funcs {
		lo := d.u()
		cd.funcs[i] = funcRange{lo: lo, hi: lo + d.u(), node: d.i32()}
		if f := cd.funcs[i]; f.node < 0 || int(f.node) >= len(cd.nodes) {
			return &cuData{}
		}
	}
	if d.err != nil {
		return &cuData{}
	}
	cd.maxHi = prefixMax(len(cd.funcs), func(i int) uint64 { return cd.funcs[i].hi })
	return cd
}
