package elfobj

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"unsafe"

	"github.com/rewindstack/rewind/internal/cachefile"
)

// The symbol-table cache keeps the table Symbolize builds from a large
// object (libc's separate debug file: about 10,000 functions, 1.3 ms to
// build, most of it reading and sorting) in a file under the persistent
// cache directory, named by the object's build-id and a hash of the file's
// identity (cachefile.Identity). A later run maps the file and uses the
// table in place: no reading of .symtab, no sorting, no copies. The file is
// checksummed (package cachefile); a file that does not decode, or whose
// entries break the invariants Symbolize relies on, is ignored and
// rewritten.

// symCacheDir is where tables are cached; "" for nowhere.
var symCacheDir atomic.Pointer[string]

// CacheSymbols makes symbol tables built from then on be kept in dir (the
// persistent cache directory, see package internal/cachefile for the
// checks every read and write makes) and read back from there by later
// runs. "" turns it off. Only tables of objects with at least
// minCachedSymbols bytes of symbol tables are kept: smaller ones build
// faster than a file is opened. (Objects without a build-id are kept
// too, named by their identity alone: the symbols of a build's Go tools,
// built anew by every report, were 42 MB of its heap.)
func CacheSymbols(dir string) { symCacheDir.Store(&dir) }

const (
	symCacheMagic    = "RWSYM002"
	minCachedSymbols = 64 << 10
	symHeaderLen     = len(symCacheMagic) + 3*8
	symEntryLen      = 24
)

// The entry layout the file shares with memory, so that a little-endian
// host uses the mapped file in place.
var _ [symEntryLen - unsafe.Sizeof(symEntry{})]byte
var _ [unsafe.Sizeof(symEntry{}) - symEntryLen]byte

// loadSymbols is LoadSymbols' work: the cached table when there is a good
// one, else a built one (cached for next time).
func (f *File) loadSymbols() (*symtab, error) {
	dir := f.symbolCacheDir()
	if dir == "" {
		return f.buildSymbols()
	}
	id := hex.EncodeToString(f.BuildID)
	if id == "" {
		// No build-id (Go's toolchain and the programs it builds carry
		// only Go's own): the file's identity alone names the table.
		id = "00"
	}
	h := sha256.New()
	h.Write([]byte(symCacheMagic))
	cachefile.Identity(h, f.Path)
	sum := hex.EncodeToString(h.Sum(nil)[:12])
	rel := "symbols/" + id[:2] + "/" + id[2:] + "-" + sum
	key := symCacheMagic + id + sum
	if data, err := cachefile.Read(dir, rel, key, maxSymbols*symEntryLen); err == nil {
		if t, err := decodeSymtab(data); err == nil {
			return t, nil
		}
	}
	t, err := f.buildSymbols()
	if err == nil {
		_ = cachefile.Write(dir, rel, key, t.encode()) // the cache is an optimisation
	}
	return t, err
}

// symbolCacheDir is where f's symbol table is cached: "" when caching is
// off, or f has no path, or its tables are small.
func (f *File) symbolCacheDir() string {
	p := symCacheDir.Load()
	if p == nil || *p == "" || f.Path == "" {
		return ""
	}
	var n uint64
	for i := range f.secs {
		if t := f.secs[i].typ; t == elf.SHT_SYMTAB || t == elf.SHT_DYNSYM {
			n += f.secs[i].size
		}
	}
	if n < minCachedSymbols {
		return ""
	}
	return *p
}

// encode serialises t: the magic, the numbers of heads and aliases and
// the length of the names (little-endian uint64s), the heads and the
// aliases (addr, end: uint64; off, n: uint32), the names.
func (t *symtab) encode() []byte {
	b := make([]byte, 0, symHeaderLen+symEntryLen*(len(t.heads)+len(t.aliases))+len(t.names))
	b = append(b, symCacheMagic...)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(t.heads)))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(t.aliases)))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(t.names)))
	for _, list := range [][]symEntry{t.heads, t.aliases} {
		for _, e := range list {
			b = binary.LittleEndian.AppendUint64(b, e.addr)
			b = binary.LittleEndian.AppendUint64(b, e.end)
			b = binary.LittleEndian.AppendUint32(b, e.off)
			b = binary.LittleEndian.AppendUint32(b, e.n)
		}
	}
	return append(b, t.names...)
}

var errSymCache = errors.New("malformed symbol-table cache file")

// decodeSymtab decodes what encode wrote and checks what Symbolize relies
// on: heads strictly ascending, names inside the name bytes. On a
// little-endian host the entries and names are used in place (data must
// stay unmodified and mapped, as cachefile.Read's are).
func decodeSymtab(data []byte) (*symtab, error) {
	if len(data) < symHeaderLen || string(data[:len(symCacheMagic)]) != symCacheMagic {
		return nil, errSymCache
	}
	le := binary.LittleEndian
	nh := le.Uint64(data[8:])
	na := le.Uint64(data[16:])
	nn := le.Uint64(data[24:])
	if nh > maxSymbols || na > maxSymbols || nn > math.MaxUint32 ||
		uint64(len(data)) != uint64(symHeaderLen)+symEntryLen*(nh+na)+nn {
		return nil, fmt.Errorf("%w: sizes %d, %d, %d for %d bytes", errSymCache, nh, na, nn, len(data))
	}
	entries := data[symHeaderLen : symHeaderLen+symEntryLen*int(nh+na)]
	t := &symtab{}
	if names := data[len(data)-int(nn):]; len(names) > 0 {
		t.names = unsafe.String(&names[0], len(names))
	}
	all := decodeEntries(entries, int(nh+na))
	t.heads, t.aliases = all[:nh:nh], all[nh:]
	for i := range all {
		e := &all[i]
		if uint64(e.off)+uint64(e.n) > nn {
			return nil, fmt.Errorf("%w: name of entry %d outside the names", errSymCache, i)
		}
		if i < int(nh) && i > 0 && all[i-1].addr >= e.addr {
			return nil, fmt.Errorf("%w: entries %d and %d out of order", errSymCache, i-1, i)
		}
	}
	t.fillMaxEnd()
	return t, nil
}

// decodeEntries returns the n entries encoded in b: b itself on a
// little-endian host (when aligned), else a decoded copy.
func decodeEntries(b []byte, n int) []symEntry {
	if n == 0 {
		return nil
	}
	var probe uint16 = 1
	littleEndian := *(*byte)(unsafe.Pointer(&probe)) == 1
	if littleEndian && uintptr(unsafe.Pointer(&b[0]))%unsafe.Alignof(symEntry{}) == 0 {
		return unsafe.Slice((*symEntry)(unsafe.Pointer(&b[0])), n)
	}
	out := make([]symEntry, n)
	for i := range out {
		e := b[i*symEntryLen:]
		out[i] = symEntry{
			addr: binary.LittleEndian.Uint64(e), end: binary.LittleEndian.Uint64(e[8:]),
			off: binary.LittleEndian.Uint32(e[16:]), n: binary.LittleEndian.Uint32(e[20:]),
		}
	}
	return out
}
