package symbolize

import (
	"debug/elf"
	"strings"
	"testing"
)

// TestCppMatchesAddr2lineAndCxxfilt: every instruction and return address
// of the C++ program's functions expands as addr2line -f -i -C does
// (demangled linkage names for inlined member templates), and the
// physical names are c++filt's rendering of the symbol (kept raw in
// Mangled).
func TestCppMatchesAddr2lineAndCxxfilt(t *testing.T) {
	exe := buildC(t, "g++", "names.cc", "-O2", "-g")
	ef, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	syms, _ := ef.Symbols()
	ef.Close()
	var mangled []string
	var addrs []uint64
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && strings.HasPrefix(s.Name, "_Z") && s.Value != 0 {
			mangled = append(mangled, s.Name)
			addrs = append(addrs, s.Value)
		}
	}
	if len(mangled) < 4 {
		t.Fatalf("only %d mangled functions: %v", len(mangled), mangled)
	}
	filt := strings.Split(strings.TrimSpace(run(t, strings.Join(mangled, "\n")+"\n", needTool(t, "c++filt"))), "\n")
	space, bias := loadSpace(t, exe)
	sym := &Symbolizer{Cache: NewCache()}
	var lambda, template bool
	for i, raw := range mangled {
		loc := sym.Addr(space, addrs[i]+bias)
		if loc.Function != filt[i] || loc.Mangled != raw || loc.Offset != 0 {
			t.Errorf("%s at %#x: got %q (mangled %q, offset %#x), c++filt says %q", raw, addrs[i], loc.Function, loc.Mangled, loc.Offset, filt[i])
		}
		lambda = lambda || strings.Contains(loc.Function, "{lambda(int)#1}")
		template = template || strings.Contains(loc.Function, "Box<int>::")
	}
	if !lambda || !template {
		t.Errorf("no lambda (%v) or template (%v) among %q", lambda, template, filt)
	}
	if Demangle(mangled[0]) != filt[0] {
		t.Errorf("Demangle(%q) = %q", mangled[0], Demangle(mangled[0]))
	}
	deepest := compareWithAddr2line(t, exe, append([]string{"main"}, mangled...)...)
	if deepest < 2 {
		t.Error("no inlined member template call seen")
	}
}
