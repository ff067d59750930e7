package cfi

import (
	"bufio"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/regs"
)

// This file checks Parse and Rows against readelf --debug-dump=frames-interp
// (binutils), entry by entry and row by row.

// reEntry matches a CIE or FDE heading line of readelf's output.
var reEntry = regexp.MustCompile(`^([0-9a-f]{8,16}) ([0-9a-f]{8,16}) ([0-9a-f]{8,16}) (CIE|FDE)(?: cie=([0-9a-f]+) pc=([0-9a-f]+)\.\.([0-9a-f]+))?`)

// reRow matches a row of an interpreted table.
var reRow = regexp.MustCompile(`^[0-9a-f]{8,16} `)

type reRowT struct {
	loc  uint64
	cols []string // CFA first, then one value per header column
	line string
}

type reEntryT struct {
	off    uint64
	isCIE  bool
	cie    uint64
	lo, hi uint64
	header []string // column names after LOC: "CFA", "rbx", ..., "ra"
	rows   []reRowT
}

// readelfFrames runs readelf and returns, per section name (".eh_frame",
// ".debug_frame"), the entries in order.
func readelfFrames(t *testing.T, path string) map[string][]*reEntryT {
	t.Helper()
	needTool(t, "readelf")
	out, err := exec.Command("readelf", "-wN", "-wF", path).Output()
	if err != nil {
		t.Fatalf("readelf -wN -wF %s: %v", path, err)
	}
	res := map[string][]*reEntryT{}
	var sec string
	var cur *reEntryT
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.Contains(line, "ZERO terminator"):
			cur = nil
		case strings.HasPrefix(line, "Contents of the "):
			sec = strings.Fields(line)[3]
			cur = nil
		case reEntry.MatchString(line):
			m := reEntry.FindStringSubmatch(line)
			cur = &reEntryT{isCIE: m[4] == "CIE"}
			cur.off, _ = strconv.ParseUint(m[1], 16, 64)
			if !cur.isCIE {
				cur.cie, _ = strconv.ParseUint(m[5], 16, 64)
				cur.lo, _ = strconv.ParseUint(m[6], 16, 64)
				cur.hi, _ = strconv.ParseUint(m[7], 16, 64)
			}
			res[sec] = append(res[sec], cur)
		case strings.HasPrefix(line, "   LOC"):
			if cur == nil {
				t.Fatalf("table header outside entry: %q", line)
			}
			cur.header = strings.Fields(line)[1:]
		case cur != nil && cur.header != nil && reRow.MatchString(line):
			f := strings.Fields(line)
			var cols []string
			for _, s := range f[1:] {
				// "r9 (r9)": readelf names the register of a
				// DW_CFA_register rule in parentheses.
				if strings.HasPrefix(s, "(") && len(cols) > 0 {
					cols[len(cols)-1] += " " + s
					continue
				}
				cols = append(cols, s)
			}
			loc, _ := strconv.ParseUint(f[0], 16, 64)
			cur.rows = append(cur.rows, reRowT{loc: loc, cols: cols, line: line})
		}
	}
	return res
}

// amd64 register names as readelf prints them.
var readelfRegs = func() map[string]int {
	m := map[string]int{}
	for i, n := range []string{"rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp",
		"r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip"} {
		m[n] = i
	}
	for i := 0; i < 16; i++ {
		m[fmt.Sprintf("xmm%d", i)] = 17 + i
	}
	return m
}()

func regNum(name string, ra uint64) (int, bool) {
	if name == "ra" {
		return int(ra), true
	}
	if n, ok := readelfRegs[name]; ok {
		return n, true
	}
	if strings.HasPrefix(name, "r") {
		if n, err := strconv.Atoi(name[1:]); err == nil {
			return n, true
		}
	}
	return 0, false
}

// checkCFA compares a CFA column ("rsp+8", "exp") with a rule.
func checkCFA(want string, got CFARule) error {
	if want == "exp" {
		if got.Kind != CFAExpression {
			return fmt.Errorf("CFA: want expression, got %+v", got)
		}
		return nil
	}
	i := strings.LastIndexAny(want, "+-")
	if i < 0 {
		return fmt.Errorf("CFA: cannot parse %q", want)
	}
	reg, ok := regNum(want[:i], ^uint64(0))
	off, err := strconv.ParseInt(want[i:], 10, 64)
	if !ok || err != nil {
		return fmt.Errorf("CFA: cannot parse %q", want)
	}
	if got.Kind != CFARegOffset || int(got.Reg) != reg || got.Offset != off {
		return fmt.Errorf("CFA: want %s, got %+v", want, got)
	}
	return nil
}

// checkRule compares one register column with a rule. readelf prints "u"
// both for DW_CFA_undefined and for registers that have no rule yet (in
// rows before the one where the FDE first mentions them), so "u" accepts
// either.
func checkRule(want string, got Rule) error {
	bad := func() error { return fmt.Errorf("want %s, got %s %+v", want, got.Kind, got) }
	switch {
	case want == "u":
		if got.Kind != RuleUndefined && got.Kind != RuleSameValue {
			return bad()
		}
	case want == "s":
		if got.Kind != RuleSameValue {
			return bad()
		}
	case want == "exp":
		if got.Kind != RuleExpression || len(got.Expr) == 0 {
			return bad()
		}
	case want == "vexp":
		if got.Kind != RuleValExpression || len(got.Expr) == 0 {
			return bad()
		}
	case strings.HasPrefix(want, "c"), strings.HasPrefix(want, "v"):
		off, err := strconv.ParseInt(want[1:], 10, 64)
		if err != nil {
			return fmt.Errorf("cannot parse %q", want)
		}
		k := RuleOffset
		if want[0] == 'v' {
			k = RuleValOffset
		}
		if got.Kind != k || got.Offset != off {
			return bad()
		}
	case strings.HasPrefix(want, "r"):
		n, err := strconv.Atoi(strings.Fields(want)[0][1:])
		if err != nil {
			return fmt.Errorf("cannot parse %q", want)
		}
		if got.Kind != RuleRegister || int(got.Reg) != n {
			return bad()
		}
	default:
		return fmt.Errorf("cannot parse %q", want)
	}
	return nil
}

// compareWithReadelf parses sec and checks every FDE and row against the
// readelf entries for the section. It returns the number of FDEs and rows
// compared.
func compareWithReadelf(t *testing.T, sec *Section, entries []*reEntryT) (nfde, nrow int) {
	t.Helper()
	fdes, err := Parse(sec)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	cies := map[uint64]*reEntryT{}
	var want []*reEntryT
	for _, e := range entries {
		if e.isCIE {
			cies[e.off] = e
		} else if e.lo < e.hi {
			want = append(want, e)
		}
	}
	if len(fdes) != len(want) {
		t.Errorf("%s: Parse found %d FDEs, readelf %d", sec.Name, len(fdes), len(want))
	}
	errs := 0
	for i := 0; i < len(fdes) && i < len(want); i++ {
		f, w := fdes[i], want[i]
		if f.Offset != w.off || f.Start != w.lo || f.End != w.hi || f.CIE.Offset != w.cie {
			t.Errorf("%s FDE %d: got off %#x cie %#x [%#x,%#x), readelf off %#x cie %#x [%#x,%#x)",
				sec.Name, i, f.Offset, f.CIE.Offset, f.Start, f.End, w.off, w.cie, w.lo, w.hi)
			errs++
			continue
		}
		// readelf prints no table for an FDE without instructions;
		// the CIE's row then applies to the whole range.
		header, rows := w.header, w.rows
		if rows == nil {
			c := cies[w.cie]
			if c == nil || len(c.rows) != 1 {
				t.Fatalf("%s FDE %#x: no table and no single-row CIE %#x", sec.Name, w.off, w.cie)
			}
			header = c.header
			rows = []reRowT{{loc: f.Start, cols: c.rows[0].cols, line: c.rows[0].line}}
		}
		// readelf prints a row at every advance; keep the last of
		// rows with the same location and drop those past the end.
		var exp []reRowT
		for _, r := range rows {
			if r.loc >= f.End {
				continue
			}
			if n := len(exp); n > 0 && exp[n-1].loc == r.loc {
				exp[n-1] = r
				continue
			}
			exp = append(exp, r)
		}
		var got []Row
		err := f.Rows(func(r *Row) error { got = append(got, *r); return nil })
		if err != nil {
			t.Errorf("%s FDE %#x: Rows: %v", sec.Name, f.Offset, err)
			errs++
			continue
		}
		if len(got) != len(exp) {
			t.Errorf("%s FDE %#x: %d rows, readelf %d", sec.Name, f.Offset, len(got), len(exp))
			errs++
			continue
		}
		for j, g := range got {
			e := exp[j]
			end := f.End
			if j+1 < len(exp) {
				end = exp[j+1].loc
			}
			var problems []string
			if g.Start != e.loc || g.End != end {
				problems = append(problems, fmt.Sprintf("range [%#x,%#x), want [%#x,%#x)", g.Start, g.End, e.loc, end))
			}
			if len(e.cols) != len(header) {
				t.Fatalf("readelf row %q has %d columns, header %d", e.line, len(e.cols), len(header))
			}
			if err := checkCFA(e.cols[0], g.CFA); err != nil {
				problems = append(problems, err.Error())
			}
			seen := map[int]bool{}
			for k, name := range header[1:] {
				n, ok := regNum(name, f.CIE.RAReg)
				if !ok || n >= regs.MaxRegs {
					// Every register below MaxRegs has a
					// known name (rax..rip, xmm0-15);
					// others (st0, mm0, ...) are dropped.
					continue
				}
				seen[n] = true
				if err := checkRule(e.cols[k+1], g.Regs[n]); err != nil {
					problems = append(problems, fmt.Sprintf("%s: %v", name, err))
				}
			}
			for n := 0; n < regs.MaxRegs; n++ {
				if !seen[n] && g.Regs[n].Kind != RuleSameValue {
					problems = append(problems, fmt.Sprintf("r%d: readelf has no column, got %+v", n, g.Regs[n]))
				}
			}
			if problems != nil {
				t.Errorf("%s FDE %#x row %d (%s): %s", sec.Name, f.Offset, j, e.line, strings.Join(problems, "; "))
				errs++
			}
			nrow++
		}
		if errs > 20 {
			t.Fatalf("too many differences")
		}
		nfde++
	}
	return nfde, nrow
}

func TestReadelfLibc(t *testing.T) {
	sec := mustSection(t, libcPath, ".eh_frame")
	re := readelfFrames(t, libcPath)
	nf, nr := compareWithReadelf(t, sec, re[".eh_frame"])
	t.Logf("libc .eh_frame: %d FDEs, %d rows agree with readelf", nf, nr)
	if nf < 1000 {
		t.Errorf("only %d FDEs compared", nf)
	}
}

func TestReadelfGCC(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		flags   []string
		section string
	}{
		{"O2-eh", []string{"-O2", "-fexceptions"}, ".eh_frame"},
		{"O0-eh", []string{"-O0"}, ".eh_frame"},
		{"Os-nopie", []string{"-Os", "-no-pie", "-fno-omit-frame-pointer"}, ".eh_frame"},
		{"O2-debug-v1", []string{"-O2", "-g", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables"}, ".debug_frame"},
		{"O2-debug-v3", []string{"-O2", "-g", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables", "-Wa,--gdwarf-cie-version=3"}, ".debug_frame"},
		{"O2-debug-v4", []string{"-O2", "-g", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables", "-Wa,--gdwarf-cie-version=4"}, ".debug_frame"},
		{"O1-eh-v3", []string{"-O1", "-Wa,--gdwarf-cie-version=3"}, ".eh_frame"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exe := buildC(t, dir, tc.name, tc.flags...)
			re := readelfFrames(t, exe)
			for _, name := range []string{".eh_frame", ".debug_frame"} {
				sec, ok := elfSection(t, exe, name)
				if !ok {
					if name == tc.section {
						t.Fatalf("no %s", name)
					}
					continue
				}
				nf, nr := compareWithReadelf(t, sec, re[name])
				t.Logf("%s: %d FDEs, %d rows agree with readelf", name, nf, nr)
				if name == tc.section && nf < 5 {
					t.Errorf("%s: only %d FDEs", name, nf)
				}
			}
		})
	}
}
