package profiles

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Kallsyms names kernel addresses from /proc/kallsyms.
type Kallsyms struct {
	addrs []uint64
	names []string // while parsing; then blob and ends hold them
	blob  string   // every name, concatenated in address order
	ends  []uint32 // ends[i] is where name i ends in blob
}

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
	k := &Kallsyms{}
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
		k.addrs = append(k.addrs, a)
		k.names = append(k.names, string(name))
	}
	if !nonzero {
		return nil, fmt.Errorf("kallsyms shows no addresses (kernel.kptr_restrict hides them; run as root)")
	}
	sort.Stable(byAddr{k})
	var blob strings.Builder
	k.ends = make([]uint32, len(k.names))
	for i, n := range k.names {
		blob.WriteString(n)
		k.ends[i] = uint32(blob.Len())
	}
	k.blob, k.names = blob.String(), nil
	return k, nil
}

// name returns symbol i's name.
func (k *Kallsyms) name(i int) string {
	start := uint32(0)
	if i > 0 {
		start = k.ends[i-1]
	}
	return k.blob[start:k.ends[i]]
}

type byAddr struct{ k *Kallsyms }

func (b byAddr) Len() int           { return len(b.k.addrs) }
func (b byAddr) Less(i, j int) bool { return b.k.addrs[i] < b.k.addrs[j] }
func (b byAddr) Swap(i, j int) {
	b.k.addrs[i], b.k.addrs[j] = b.k.addrs[j], b.k.addrs[i]
	b.k.names[i], b.k.names[j] = b.k.names[j], b.k.names[i]
}

// Lookup returns the symbol containing addr and the offset into it.
func (k *Kallsyms) Lookup(addr uint64) (string, uint64, bool) {
	if k == nil {
		return "", 0, false
	}
	i := sort.Search(len(k.addrs), func(i int) bool { return k.addrs[i] > addr }) - 1
	if i < 0 {
		return "", 0, false
	}
	return k.name(i), addr - k.addrs[i], true
}

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
	path := filepath.Join(dir, "kallsyms", hex.EncodeToString(h.Sum(nil)[:12]))
	if b, err := os.ReadFile(path); err == nil {
		if k, err := decodeKallsyms(b); err == nil {
			return k, nil
		}
	}
	k, err := LoadKallsyms()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err == nil {
		if f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*"); err == nil {
			_, werr := f.Write(k.encode())
			if cerr := f.Close(); werr == nil && cerr == nil {
				werr = os.Rename(f.Name(), path)
			}
			if werr != nil {
				os.Remove(f.Name())
			}
		}
	}
	return k, nil
}

// encode writes the magic, the count, the sorted addresses (8 bytes
// each), the ends of the names in the blob (4 bytes each) and the blob.
func (k *Kallsyms) encode() []byte {
	b := binary.LittleEndian.AppendUint32([]byte(kallsymsMagic), uint32(len(k.addrs)))
	for _, a := range k.addrs {
		b = binary.LittleEndian.AppendUint64(b, a)
	}
	for _, e := range k.ends {
		b = binary.LittleEndian.AppendUint32(b, e)
	}
	return append(b, k.blob...)
}

// decodeKallsyms reads what encode wrote; names stay in one string.
func decodeKallsyms(b []byte) (*Kallsyms, error) {
	bad := fmt.Errorf("kallsyms cache: corrupt")
	if len(b) < len(kallsymsMagic)+4 || string(b[:len(kallsymsMagic)]) != kallsymsMagic {
		return nil, bad
	}
	b = b[len(kallsymsMagic):]
	n := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if n == 0 || uint64(n)*12 > uint64(len(b)) {
		return nil, bad
	}
	k := &Kallsyms{addrs: make([]uint64, n), ends: make([]uint32, n)}
	for i := range k.addrs {
		k.addrs[i] = binary.LittleEndian.Uint64(b[8*i:])
		if i > 0 && k.addrs[i] < k.addrs[i-1] {
			return nil, bad
		}
	}
	b = b[8*n:]
	k.blob = string(b[4*n:])
	for i := range k.ends {
		k.ends[i] = binary.LittleEndian.Uint32(b[4*i:])
		if k.ends[i] > uint32(len(k.blob)) || i > 0 && k.ends[i] < k.ends[i-1] {
			return nil, bad
		}
	}
	return k, nil
}
