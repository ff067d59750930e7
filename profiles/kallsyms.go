package profiles

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sort"
)

// Kallsyms names kernel addresses from /proc/kallsyms.
type Kallsyms struct {
	addrs []uint64
	names []string
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
	return k, nil
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
	return k.names[i], addr - k.addrs[i], true
}
