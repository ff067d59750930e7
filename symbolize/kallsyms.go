package symbolize

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/rewindstack/rewind/internal/cachefile"
)

// Kallsyms names kernel addresses from /proc/kallsyms.
//
// The table is held in its cache encoding (see encode) and searched in
// place, so loading a cached table of 200,000 symbols costs one file mapping
// and no decoding.
type Kallsyms struct {
	n     int
	addrs []byte // n little-endian uint64, sorted
	ends  []byte // n little-endian uint32: where each name ends in blob
	blob  []byte // the names, concatenated in address order
	file  []byte // the whole encoding
}

func (k *Kallsyms) addr(i int) uint64 { return binary.LittleEndian.Uint64(k.addrs[8*i:]) }

// LoadKallsyms reads /proc/kallsyms. Addresses read as zero when
// kernel.kptr_restrict hides them from this user; that is an error.
func LoadKallsyms() (*Kallsyms, error) {
	b, err := readAll("/proc/kallsyms")
	if err != nil {
		return nil, err
	}
	return ParseKallsyms(bytes.NewReader(b))
}

// readAll reads a /proc file in large chunks (its size reads as 0).
func readAll(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, 0, 8<<20)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF || (err == nil && n == 0) {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// ParseKallsyms parses the kallsyms format ("ADDR TYPE NAME [module]"),
// keeping text symbols.
func ParseKallsyms(r io.Reader) (*Kallsyms, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	var addrs []uint64
	var names []string
	nonzero := false
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		// ADDR SP TYPE SP NAME [\t[module]]
		sp := bytes.IndexByte(line, ' ')
		if sp <= 0 || len(line) < sp+4 || line[sp+2] != ' ' {
			continue
		}
		switch line[sp+1] {
		case 't', 'T', 'w', 'W':
		default:
			continue
		}
		var a uint64
		ok := sp <= 16
		for _, c := range line[:sp] {
			switch {
			case c >= '0' && c <= '9':
				a = a<<4 | uint64(c-'0')
			case c >= 'a' && c <= 'f':
				a = a<<4 | uint64(c-'a'+10)
			case c >= 'A' && c <= 'F':
				a = a<<4 | uint64(c-'A'+10)
			default:
				ok = false
			}
		}
		if !ok {
			continue
		}
		name := line[sp+3:]
		if i := bytes.IndexAny(name, " \t"); i >= 0 {
			name = name[:i]
		}
		if a != 0 {
			nonzero = true
		}
		addrs = append(addrs, a)
		names = append(names, string(name))
	}
	if !nonzero {
		return nil, fmt.Errorf("kallsyms shows no addresses (kernel.kptr_restrict hides them; run as root)")
	}
	idx := make([]int, len(addrs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return addrs[idx[a]] < addrs[idx[b]] })
	enc := binary.LittleEndian.AppendUint32([]byte(kallsymsMagic), uint32(len(idx)))
	for _, i := range idx {
		enc = binary.LittleEndian.AppendUint64(enc, addrs[i])
	}
	end := 0
	for _, i := range idx {
		end += len(names[i])
		enc = binary.LittleEndian.AppendUint32(enc, uint32(end))
	}
	for _, i := range idx {
		enc = append(enc, names[i]...)
	}
	return decodeKallsyms(enc)
}

// name returns symbol i's name ("" if the table is inconsistent).
func (k *Kallsyms) name(i int) string {
	start := uint32(0)
	if i > 0 {
		start = binary.LittleEndian.Uint32(k.ends[4*(i-1):])
	}
	end := binary.LittleEndian.Uint32(k.ends[4*i:])
	if start > end || end > uint32(len(k.blob)) {
		return ""
	}
	return string(k.blob[start:end])
}

// Lookup returns the symbol containing addr and the offset into it.
func (k *Kallsyms) Lookup(addr uint64) (string, uint64, bool) {
	if k == nil {
		return "", 0, false
	}
	i := sort.Search(k.n, func(i int) bool { return k.addr(i) > addr }) - 1
	if i < 0 {
		return "", 0, false
	}
	return k.name(i), addr - k.addr(i), true
}

// maxKallsymsFile bounds a cached kernel symbol table read back.
const maxKallsymsFile = 1 << 28

// kallsymsMagic starts a cached symbol table; its last bytes version it.
const kallsymsMagic = "RWKS0001"

// LoadKallsymsCached is LoadKallsyms with a cache in dir: reading
// /proc/kallsyms costs 50-100 ms (the kernel formats every symbol), so the
// parsed text symbols are kept in a file named by the boot ID and a hash of
// /proc/modules, the two things that change the table. An unusable cache
// file is ignored and rewritten; dir "" means no cache.
func LoadKallsymsCached(dir string) (*Kallsyms, error) {
	if dir == "" {
		return LoadKallsyms()
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return LoadKallsyms()
	}
	h := sha256.New()
	h.Write(boot)
	// A kernel without module support has no /proc/modules: its table is
	// fixed for the boot. Reference counts and states change without
	// changing symbols, so only names, sizes and load addresses count.
	if mods, err := readAll("/proc/modules"); err == nil {
		for _, line := range bytes.Split(mods, []byte("\n")) {
			if f := bytes.Fields(line); len(f) >= 6 {
				fmt.Fprintf(h, "%s %s %s\n", f[0], f[1], f[5])
			}
		}
	} else if !os.IsNotExist(err) {
		return LoadKallsyms()
	}
	name := hex.EncodeToString(h.Sum(nil)[:12])
	rel, key := "kallsyms/"+name, kallsymsMagic+name
	b, err := cachefile.Read(dir, rel, key, maxKallsymsFile)
	var k *Kallsyms
	if err == nil {
		if k, err = decodeKallsyms(b); err == nil {
			return k, nil
		}
	}
	cachefile.Note(err, "kernel symbols read again")
	k, err = LoadKallsyms()
	if err != nil {
		return nil, err
	}
	// A cache: failing to write it is harmless (but noted).
	cachefile.Note(cachefile.Write(dir, rel, key, k.file), "kernel symbols not saved")
	return k, nil
}

// decodeKallsyms checks a table's encoding — the magic, the count n, n
// sorted little-endian uint64 addresses, n uint32 ends of the names, and
// the names — and returns it without copying. Lookups check the ends, so a
// corrupt file can give wrong names but never a panic.
func decodeKallsyms(b []byte) (*Kallsyms, error) {
	bad := fmt.Errorf("kallsyms cache: corrupt")
	if len(b) < len(kallsymsMagic)+4 || string(b[:len(kallsymsMagic)]) != kallsymsMagic {
		return nil, bad
	}
	rest := b[len(kallsymsMagic)+4:]
	n := int(binary.LittleEndian.Uint32(b[len(kallsymsMagic):]))
	if n == 0 || uint64(n)*12 > uint64(len(rest)) {
		return nil, bad
	}
	k := &Kallsyms{n: n, addrs: rest[:8*n], ends: rest[8*n : 12*n], blob: rest[12*n:], file: b}
	if last := binary.LittleEndian.Uint32(k.ends[4*(n-1):]); last != uint32(len(k.blob)) {
		return nil, bad
	}
	return k, nil
}
