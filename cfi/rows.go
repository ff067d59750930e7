package cfi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sync"

	"github.com/rewindstack/rewind/regs"
)

// RuleKind says how a register's value in the caller's frame is found.
type RuleKind uint8

// Register rule kinds.
const (
	// RuleSameValue: the value is unchanged. This is the default for
	// registers with no rule, as well as DW_CFA_same_value.
	RuleSameValue RuleKind = iota
	// RuleUndefined: the value cannot be recovered (DW_CFA_undefined;
	// for the return address column it marks the outermost frame).
	RuleUndefined
	// RuleOffset: the value is saved in memory at CFA + Offset.
	RuleOffset
	// RuleValOffset: the value is CFA + Offset.
	RuleValOffset
	// RuleRegister: the value is in register Reg.
	RuleRegister
	// RuleExpression: the value is saved in memory at the address
	// EvalExpr(Expr) computes with the CFA pushed first.
	RuleExpression
	// RuleValExpression: the value is EvalExpr(Expr) with the CFA pushed
	// first.
	RuleValExpression
)

// String returns the rule kind's name.
func (k RuleKind) String() string {
	switch k {
	case RuleSameValue:
		return "same_value"
	case RuleUndefined:
		return "undefined"
	case RuleOffset:
		return "offset"
	case RuleValOffset:
		return "val_offset"
	case RuleRegister:
		return "register"
	case RuleExpression:
		return "expression"
	case RuleValExpression:
		return "val_expression"
	}
	return fmt.Sprintf("RuleKind(%d)", uint8(k))
}

// Rule is the rule for recovering one register. Which fields are used
// depends on Kind: Offset for RuleOffset and RuleValOffset (already
// multiplied by the data alignment factor), Reg for RuleRegister, Expr for
// RuleExpression and RuleValExpression (a sub-slice of the section data).
type Rule struct {
	Kind   RuleKind
	Reg    uint16
	Offset int64
	Expr   []byte
}

// CFAKind says how the Canonical Frame Address is computed.
type CFAKind uint8

// CFA rule kinds.
const (
	// CFARegOffset: CFA = value of register Reg + Offset.
	CFARegOffset CFAKind = iota
	// CFAExpression: CFA = EvalExpr(Expr) with nothing pushed.
	CFAExpression

	cfaUnset CFAKind = 0xff // no CFA rule yet (internal)
)

// CFARule is the rule that computes the CFA.
type CFARule struct {
	Kind   CFAKind
	Reg    uint16
	Offset int64
	Expr   []byte
}

// Row is the unwind row for the PC range [Start, End).
type Row struct {
	Start, End uint64
	// CFA computes the Canonical Frame Address, the value of the stack
	// pointer at the call site in the caller.
	CFA CFARule
	// Regs holds the rules indexed by DWARF register number. Rules for
	// registers >= regs.MaxRegs are accepted and dropped.
	Regs [regs.MaxRegs]Rule
	// ArgsSize is the last DW_CFA_GNU_args_size operand: bytes of
	// outgoing arguments pushed at this point.
	ArgsSize uint64
	// RASigned is toggled by DW_CFA_AARCH64_negate_ra_state (opcode 0x2d,
	// which is DW_CFA_GNU_window_save on SPARC): on arm64 the return
	// address was signed with pointer authentication and must be
	// stripped.
	RASigned bool
}

// maxRememberDepth bounds the DW_CFA_remember_state stack.
const maxRememberDepth = 64

// machine is the state of the call frame instruction interpreter. Machines
// are pooled: Rows reuses one Row and one remember stack.
type machine struct {
	cur     Row
	init    *Row  // the CIE's initial rules, for DW_CFA_restore
	initBuf Row   // holds them when the CIE has no precomputed ones
	stack   []Row // DW_CFA_remember_state
	loc     uint64
	end     uint64
	fde     *FDE
	cie     *CIE
	sec     *Section // section of the FDE, or fake
	fake    Section  // stands in for hand-built CIEs with no section
	fn      func(*Row) error

	inCIE  bool   // running the CIE's initial instructions
	find   bool   // RowAt: stop at the row covering target
	target uint64 // RowAt's pc
}

var machines = sync.Pool{New: func() any { return new(machine) }}

// errStop stops Rows early from inside RowAt.
var errStop = errors.New("stop")

// Rows executes the CIE's initial instructions, then the FDE's
// instructions, and calls fn for each row of the resulting table in address
// order, starting at f.Start. The CIE's instructions may only set rules
// (DW_CFA_advance_loc and DW_CFA_set_loc there are errors, and states it
// remembers do not carry over to the FDE); Parse runs them once per CIE.
// fn must not keep the *Row: it is reused for the next row. Rows covering no
// addresses are not reported; the last row ends at f.End, and instructions
// past f.End are not executed. An error returned by fn stops Rows and is
// returned as is; malformed instructions give a *FormatError.
func (f *FDE) Rows(fn func(*Row) error) error {
	if f == nil || f.CIE == nil {
		return &FormatError{Pkg: "cfi", Msg: "FDE has no CIE"}
	}
	m := machines.Get().(*machine)
	err := m.run(f, fn)
	m.release()
	return err
}

// RowAt returns the row covering pc, which must be in [f.Start, f.End).
// Like an unwinder, it stops executing instructions once it has the row,
// so malformed instructions after it go unnoticed.
func (f *FDE) RowAt(pc uint64) (Row, error) {
	if f == nil || f.CIE == nil {
		return Row{}, &FormatError{Pkg: "cfi", Msg: "FDE has no CIE"}
	}
	if pc < f.Start || pc >= f.End {
		return Row{}, fmt.Errorf("cfi: pc %#x outside FDE range [%#x, %#x)", pc, f.Start, f.End)
	}
	m := machines.Get().(*machine)
	m.find, m.target = true, pc
	err := m.run(f, nil)
	var out Row
	if err == errStop {
		out, err = m.cur, nil
	} else if err == nil {
		// Unreachable: rows tile [Start, End).
		err = fmt.Errorf("cfi: no row covers pc %#x", pc)
	}
	m.release()
	return out, err
}

// release returns the machine to the pool.
func (m *machine) release() {
	m.find, m.inCIE = false, false
	m.fn, m.fde, m.cie, m.sec, m.init = nil, nil, nil, nil, nil
	machines.Put(m)
}

// initialRow runs the CIE's initial instructions once, at Parse time,
// and records the rules they set up (or the error they cause) so that Rows
// need not run them again for every FDE.
func (c *CIE) initialRow() {
	if c.sec == nil {
		return
	}
	m := machines.Get().(*machine)
	f := FDE{CIE: c, Start: 0, End: ^uint64(0)}
	m.fde, m.cie, m.sec = &f, c, c.sec
	if err := m.runCIE(); err != nil {
		c.initErr = err
	} else {
		c.init = new(Row)
		*c.init = m.cur
	}
	m.release()
}

// runCIE sets up the machine and runs the CIE's initial instructions.
// They may only set rules: location changes are errors, and states they
// remember are dropped at the end.
func (m *machine) runCIE() error {
	m.stack = m.stack[:0]
	m.cur = Row{}
	m.cur.CFA.Kind = cfaUnset
	m.initBuf = m.cur
	m.init = &m.initBuf // DW_CFA_restore in the CIE: no rule
	m.inCIE = true
	_, err := m.exec(m.cie.Initial, m.cie.initOff)
	m.inCIE = false
	m.stack = m.stack[:0]
	m.initBuf = m.cur
	return err
}

func (m *machine) run(f *FDE, fn func(*Row) error) error {
	c := f.CIE
	m.fde, m.cie, m.fn = f, c, fn
	m.sec = c.sec
	if m.sec == nil {
		ps := int(c.AddressSize)
		if ps != 4 {
			ps = 8
		}
		m.fake = Section{Kind: EhFrame, ByteOrder: binary.LittleEndian, PtrSize: ps}
		m.sec = &m.fake
	}
	m.stack = m.stack[:0]
	m.loc, m.end = f.Start, f.End
	if m.loc >= m.end {
		return nil
	}
	switch {
	case c.initErr != nil:
		return c.initErr
	case c.init != nil:
		// Parse already ran the CIE's program.
		m.cur = *c.init
		m.init = c.init
	default:
		if err := m.runCIE(); err != nil {
			return err
		}
	}
	done, err := m.exec(f.Instructions, f.insOff)
	if err != nil || done {
		return err
	}
	return m.emit(m.end)
}

// emit reports the row from the current location up to next (clipped to
// the FDE's end).
func (m *machine) emit(next uint64) error {
	start, end := m.loc, next
	if end > m.end {
		end = m.end
	}
	if start >= end {
		return nil
	}
	if m.cur.CFA.Kind == cfaUnset {
		return &FormatError{Pkg: "cfi", Section: m.sec.Name, Offset: m.fde.Offset, Msg: fmt.Sprintf("no CFA rule defined at pc %#x", start)}
	}
	m.cur.Start, m.cur.End = start, end
	if m.find {
		if m.target < end {
			return errStop
		}
		return nil
	}
	return m.fn(&m.cur)
}

// advance moves the location by delta code alignment units, reporting the
// row that ends there. It returns true when the location reached the end
// of the FDE.
func (m *machine) advance(delta uint64) (bool, error) {
	hi, lo := bits.Mul64(delta, m.cie.CodeAlign)
	next := lo + m.loc
	if hi != 0 || next < m.loc {
		next = ^uint64(0)
	}
	return m.moveTo(next)
}

func (m *machine) moveTo(next uint64) (bool, error) {
	if err := m.emit(next); err != nil {
		return true, err
	}
	m.loc = next
	return m.loc >= m.end, nil
}

func (m *machine) setReg(reg uint64, r Rule) {
	if reg < regs.MaxRegs {
		m.cur.Regs[reg] = r
	}
}

// cfaNames names the DW_CFA opcodes below 0x40 for error messages.
var cfaNames = [0x40]string{
	0x00: "DW_CFA_nop",
	0x01: "DW_CFA_set_loc",
	0x02: "DW_CFA_advance_loc1",
	0x03: "DW_CFA_advance_loc2",
	0x04: "DW_CFA_advance_loc4",
	0x05: "DW_CFA_offset_extended",
	0x06: "DW_CFA_restore_extended",
	0x07: "DW_CFA_undefined",
	0x08: "DW_CFA_same_value",
	0x09: "DW_CFA_register",
	0x0a: "DW_CFA_remember_state",
	0x0b: "DW_CFA_restore_state",
	0x0c: "DW_CFA_def_cfa",
	0x0d: "DW_CFA_def_cfa_register",
	0x0e: "DW_CFA_def_cfa_offset",
	0x0f: "DW_CFA_def_cfa_expression",
	0x10: "DW_CFA_expression",
	0x11: "DW_CFA_offset_extended_sf",
	0x12: "DW_CFA_def_cfa_sf",
	0x13: "DW_CFA_def_cfa_offset_sf",
	0x14: "DW_CFA_val_offset",
	0x15: "DW_CFA_val_offset_sf",
	0x16: "DW_CFA_val_expression",
	0x1d: "DW_CFA_MIPS_advance_loc8",
	0x2d: "DW_CFA_AARCH64_negate_ra_state",
	0x2e: "DW_CFA_GNU_args_size",
	0x2f: "DW_CFA_GNU_negative_offset_extended",
}

func cfaName(op byte) string {
	switch op >> 6 {
	case 1:
		return "DW_CFA_advance_loc"
	case 2:
		return "DW_CFA_offset"
	case 3:
		return "DW_CFA_restore"
	}
	return cfaNames[op]
}

// exec runs one instruction stream; base is the section offset of code[0].
// It returns true when the FDE's end was reached (or fn failed).
func (m *machine) exec(code []byte, base uint64) (bool, error) {
	c := m.cie
	order := m.sec.ByteOrder
	i := 0
	for i < len(code) {
		opOff := i
		op := code[i]
		i++
		var a, b uint64 // unsigned operands
		var s int64     // signed operand
		switch op >> 6 {
		case 1: // DW_CFA_advance_loc
			if m.inCIE {
				return true, m.fail(op, base, opOff, "not allowed in CIE initial instructions")
			}
			if done, err := m.advance(uint64(op & 0x3f)); done || err != nil {
				return true, err
			}
			continue
		case 2: // DW_CFA_offset
			if a, i = uleb(code, i); i < 0 {
				return true, m.truncated(op, base, opOff)
			}
			m.setReg(uint64(op&0x3f), Rule{Kind: RuleOffset, Offset: int64(a) * c.DataAlign})
			continue
		case 3: // DW_CFA_restore
			if r := op & 0x3f; r < regs.MaxRegs {
				m.cur.Regs[r] = m.init.Regs[r]
			}
			continue
		}
		switch op {
		case 0x00: // DW_CFA_nop
		case 0x01: // DW_CFA_set_loc
			if m.inCIE {
				return true, m.fail(op, base, opOff, "not allowed in CIE initial instructions")
			}
			var msg string
			a, i, msg = m.readAddr(code, i, base)
			if msg != "" {
				return true, m.fail(op, base, opOff, "%s", msg)
			}
			if a < m.loc {
				return true, m.fail(op, base, opOff, "address %#x is before current location %#x", a, m.loc)
			}
			if done, err := m.moveTo(a); done || err != nil {
				return true, err
			}
		case 0x02, 0x03, 0x04, 0x1d: // DW_CFA_advance_loc1/2/4, DW_CFA_MIPS_advance_loc8
			n := 1
			switch op {
			case 0x03:
				n = 2
			case 0x04:
				n = 4
			case 0x1d:
				n = 8
			}
			var ok bool
			if a, i, ok = readUint(code, i, n, order); !ok {
				return true, m.truncated(op, base, opOff)
			}
			if m.inCIE {
				return true, m.fail(op, base, opOff, "not allowed in CIE initial instructions")
			}
			if done, err := m.advance(a); done || err != nil {
				return true, err
			}
		case 0x05, 0x14, 0x2f: // DW_CFA_offset_extended, DW_CFA_val_offset, DW_CFA_GNU_negative_offset_extended
			if a, i = uleb(code, i); i >= 0 {
				b, i = uleb(code, i)
			}
			if i < 0 {
				return true, m.truncated(op, base, opOff)
			}
			off := int64(b) * c.DataAlign
			switch op {
			case 0x05:
				m.setReg(a, Rule{Kind: RuleOffset, Offset: off})
			case 0x14:
				m.setReg(a, Rule{Kind: RuleValOffset, Offset: off})
			default:
				m.setReg(a, Rule{Kind: RuleOffset, Offset: -off})
			}
		case 0x11, 0x15: // DW_CFA_offset_extended_sf, DW_CFA_val_offset_sf
			if a, i = uleb(code, i); i >= 0 {
				s, i = sleb(code, i)
			}
			if i < 0 {
				return true, m.truncated(op, base, opOff)
			}
			k := RuleOffset
			if op == 0x15 {
				k = RuleValOffset
			}
			m.setReg(a, Rule{Kind: k, Offset: s * c.DataAlign})
		case 0x06, 0x07, 0x08: // DW_CFA_restore_extended, DW_CFA_undefined, DW_CFA_same_value
			if a, i = uleb(code, i); i < 0 {
				return true, m.truncated(op, base, opOff)
			}
			if a < regs.MaxRegs {
				switch op {
				case 0x06:
					m.cur.Regs[a] = m.init.Regs[a]
				case 0x07:
					m.cur.Regs[a] = Rule{Kind: RuleUndefined}
				default:
					m.cur.Regs[a] = Rule{Kind: RuleSameValue}
				}
			}
		case 0x09: // DW_CFA_register
			if a, i = uleb(code, i); i >= 0 {
				b, i = uleb(code, i)
			}
			if i < 0 {
				return true, m.truncated(op, base, opOff)
			}
			if b > 0xffff {
				return true, m.fail(op, base, opOff, "register number %d too large", b)
			}
			m.setReg(a, Rule{Kind: RuleRegister, Reg: uint16(b)})
		case 0x0a: // DW_CFA_remember_state
			if len(m.stack) >= maxRememberDepth {
				return true, m.fail(op, base, opOff, "more than %d remembered states", maxRememberDepth)
			}
			m.stack = append(m.stack, m.cur)
		case 0x0b: // DW_CFA_restore_state
			if len(m.stack) == 0 {
				return true, m.fail(op, base, opOff, "no remembered state")
			}
			top := &m.stack[len(m.stack)-1]
			m.cur.CFA = top.CFA
			m.cur.Regs = top.Regs
			m.cur.RASigned = top.RASigned
			m.stack = m.stack[:len(m.stack)-1]
		case 0x0c, 0x12: // DW_CFA_def_cfa, DW_CFA_def_cfa_sf
			if a, i = uleb(code, i); i >= 0 {
				if op == 0x0c {
					b, i = uleb(code, i)
					s = int64(b)
				} else {
					s, i = sleb(code, i)
					s *= c.DataAlign
				}
			}
			if i < 0 {
				return true, m.truncated(op, base, opOff)
			}
			if a > 0xffff {
				return true, m.fail(op, base, opOff, "register number %d too large", a)
			}
			m.cur.CFA = CFARule{Kind: CFARegOffset, Reg: uint16(a), Offset: s}
		case 0x0d: // DW_CFA_def_cfa_register
			if a, i = uleb(code, i); i < 0 {
				return true, m.truncated(op, base, opOff)
			}
			if a > 0xffff {
				return true, m.fail(op, base, opOff, "register number %d too large", a)
			}
			if m.cur.CFA.Kind == CFAExpression {
				return true, m.fail(op, base, opOff, "CFA is defined by an expression")
			}
			m.cur.CFA.Kind = CFARegOffset
			m.cur.CFA.Reg = uint16(a)
		case 0x0e, 0x13: // DW_CFA_def_cfa_offset, DW_CFA_def_cfa_offset_sf
			if op == 0x0e {
				a, i = uleb(code, i)
				s = int64(a)
			} else {
				s, i = sleb(code, i)
				s *= c.DataAlign
			}
			if i < 0 {
				return true, m.truncated(op, base, opOff)
			}
			if m.cur.CFA.Kind == CFAExpression {
				return true, m.fail(op, base, opOff, "CFA is defined by an expression")
			}
			m.cur.CFA.Kind = CFARegOffset
			m.cur.CFA.Offset = s
		case 0x0f: // DW_CFA_def_cfa_expression
			var e []byte
			if e, i = block(code, i); i < 0 {
				return true, m.truncated(op, base, opOff)
			}
			m.cur.CFA = CFARule{Kind: CFAExpression, Expr: e}
		case 0x10, 0x16: // DW_CFA_expression, DW_CFA_val_expression
			var e []byte
			if a, i = uleb(code, i); i >= 0 {
				e, i = block(code, i)
			}
			if i < 0 {
				return true, m.truncated(op, base, opOff)
			}
			k := RuleExpression
			if op == 0x16 {
				k = RuleValExpression
			}
			m.setReg(a, Rule{Kind: k, Expr: e})
		case 0x2d: // DW_CFA_AARCH64_negate_ra_state / DW_CFA_GNU_window_save
			m.cur.RASigned = !m.cur.RASigned
		case 0x2e: // DW_CFA_GNU_args_size
			if a, i = uleb(code, i); i < 0 {
				return true, m.truncated(op, base, opOff)
			}
			m.cur.ArgsSize = a
		default:
			return true, &FormatError{Pkg: "cfi", Section: m.sec.Name, Offset: base + uint64(opOff),
				Msg: fmt.Sprintf("unknown call frame instruction %#x", op)}
		}
	}
	return false, nil
}

// block reads a ULEB128 length and that many bytes.
func block(code []byte, i int) ([]byte, int) {
	n, i := uleb(code, i)
	if i < 0 || n > uint64(len(code)-i) {
		return nil, -1
	}
	j := i + int(n)
	return code[i:j:j], j
}

// readAddr reads the operand of DW_CFA_set_loc: a target address in
// .debug_frame, a pointer in the CIE's FDE encoding in .eh_frame.
func (m *machine) readAddr(code []byte, i int, base uint64) (uint64, int, string) {
	sec, c := m.sec, m.cie
	if sec.Kind == DebugFrame {
		v, j, ok := readUint(code, i, int(c.AddressSize), sec.ByteOrder)
		if !ok {
			return 0, i, "truncated address"
		}
		return v, j, ""
	}
	// readEnc wants section offsets, so decode from the section data when
	// there is one.
	b, at := code, i
	if sec != &m.fake {
		b, at = sec.Data[:base+uint64(len(code))], int(base)+i
	}
	v, j, ind, msg := readEnc(sec, b, at, c.FDEEncoding, m.fde.Start)
	if msg != "" {
		return 0, i, msg
	}
	if ind {
		return 0, i, "indirect address encoding"
	}
	return v, j - (at - i), ""
}

func (m *machine) truncated(op byte, base uint64, opOff int) error {
	return &FormatError{Pkg: "cfi", Section: m.sec.Name, Offset: base + uint64(opOff),
		Msg: fmt.Sprintf("%s: truncated operand", cfaName(op))}
}

func (m *machine) fail(op byte, base uint64, opOff int, format string, args ...any) error {
	return &FormatError{Pkg: "cfi", Section: m.sec.Name, Offset: base + uint64(opOff),
		Msg: cfaName(op) + ": " + fmt.Sprintf(format, args...)}
}
