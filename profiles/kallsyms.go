package profiles

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
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

// ParseKallsyms parses the kallsyms format ("ADDR TYPE NAME [module]").
func ParseKallsyms(r io.Reader) (*Kallsyms, error) {
	k := &Kallsyms{}
	type sym struct {
		addr uint64
		name string
	}
	var syms []sym
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	nonzero := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		switch f[1] {
		case "t", "T", "w", "W":
		default:
			continue
		}
		a, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			continue
		}
		if a != 0 {
			nonzero = true
		}
		syms = append(syms, sym{a, f[2]})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !nonzero {
		return nil, fmt.Errorf("/proc/kallsyms shows no addresses (kernel.kptr_restrict hides them; run as root)")
	}
	sort.SliceStable(syms, func(i, j int) bool { return syms[i].addr < syms[j].addr })
	for _, s := range syms {
		k.addrs = append(k.addrs, s.addr)
		k.names = append(k.names, s.name)
	}
	return k, nil
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
