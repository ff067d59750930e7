package symbolize

import (
	"math/bits"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ianlancetaylor/demangle"
)

// Demangle returns the human-readable form of a C++ (Itanium "_Z") or Rust
// (v0 "_R", or legacy "_ZN...17h<hash>E") symbol name, and the name itself
// when it is not mangled or cannot be demangled. It prints names as the
// binutils tools do (c++filt, nm -C, addr2line -C): C++ with parameter
// types; Rust without the legacy hash or crate disambiguators (as rustfilt
// and std's backtraces print them). A symbol version ("@GLIBCXX_3.4",
// "@@...") is kept after the demangled name, and an LLVM ".llvm.NNN"
// suffix is dropped.
//
// C++ names go through github.com/ianlancetaylor/demangle. Rust names use
// this package's own demangler: the library's Rust support misreads "00"
// as one number (so nested closures get the wrong numbers) and drops the
// first "_" of legacy identifiers such as "__rust_begin_short_backtrace";
// if our demangler rejects a name the library is tried next.
func Demangle(name string) string {
	if len(name) < 3 || name[0] != '_' || (name[1] != 'Z' && name[1] != 'R') {
		return name
	}
	base, ver := name, ""
	if at := strings.IndexByte(name, '@'); at > 0 {
		base, ver = name[:at], name[at:]
	}
	if i := strings.Index(base, ".llvm."); i > 0 {
		base = base[:i]
	}
	if strings.HasPrefix(base, "_R") {
		if s, ok := rustV0(base); ok {
			return s + ver
		}
	} else if strings.HasPrefix(base, "_ZN") {
		if s, ok := rustLegacy(base); ok {
			return s + ver
		}
	}
	s, err := demangle.ToString(base)
	if err != nil || s == "" {
		return name
	}
	return s + ver
}

// Unversioned returns a symbol name without its ELF symbol version
// ("clock_nanosleep@GLIBC_2.2.5" and "__libc_start_main@@GLIBC_2.34" give
// "clock_nanosleep" and "__libc_start_main"), as frames name functions.
func Unversioned(name string) string {
	if at := strings.IndexByte(name, '@'); at > 0 {
		return name[:at]
	}
	return name
}

// rustLegacy demangles "_ZN" {<len><ident>} "E" names whose last element
// is a Rust hash ("h" and 16 hex digits), dropping the hash.
func rustLegacy(s string) (string, bool) {
	s = s[3:]
	var elems []string
	for len(s) > 0 && s[0] != 'E' {
		if s[0] < '1' || s[0] > '9' {
			return "", false
		}
		n := 0
		for len(s) > 0 && s[0] >= '0' && s[0] <= '9' {
			n = n*10 + int(s[0]-'0')
			if n > 1<<20 {
				return "", false
			}
			s = s[1:]
		}
		if n > len(s) {
			return "", false
		}
		elems = append(elems, s[:n])
		s = s[n:]
	}
	if s != "E" || len(elems) < 2 || !isRustHash(elems[len(elems)-1]) {
		return "", false
	}
	elems = elems[:len(elems)-1]
	var b strings.Builder
	for i, e := range elems {
		if i > 0 {
			b.WriteString("::")
		}
		if strings.HasPrefix(e, "_$") {
			e = e[1:]
		}
		for len(e) > 0 {
			switch {
			case strings.HasPrefix(e, ".."):
				b.WriteString("::")
				e = e[2:]
			case e[0] == '$':
				end := strings.IndexByte(e[1:], '$')
				if end < 0 {
					return "", false
				}
				esc := e[1 : end+1]
				e = e[end+2:]
				switch esc {
				case "SP":
					b.WriteByte('@')
				case "BP":
					b.WriteByte('*')
				case "RF":
					b.WriteByte('&')
				case "LT":
					b.WriteByte('<')
				case "GT":
					b.WriteByte('>')
				case "LP":
					b.WriteByte('(')
				case "RP":
					b.WriteByte(')')
				case "C":
					b.WriteByte(',')
				default:
					if len(esc) < 2 || esc[0] != 'u' {
						return "", false
					}
					v, err := strconv.ParseUint(esc[1:], 16, 32)
					if err != nil || !utf8.ValidRune(rune(v)) {
						return "", false
					}
					b.WriteRune(rune(v))
				}
			default:
				j := 1
				for j < len(e) && e[j] != '$' && e[j] != '.' {
					j++
				}
				if e[0] == '.' && j == 1 {
					b.WriteByte('.')
					e = e[1:]
					continue
				}
				b.WriteString(e[:j])
				e = e[j:]
			}
		}
	}
	return b.String(), true
}

func isRustHash(s string) bool {
	if len(s) != 17 || s[0] != 'h' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !isHex(s[i]) {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f'
}

// Limits on the work one v0 name may cause (backreferences can make a
// short name expand exponentially).
const (
	rustMaxOut   = 1 << 16
	rustMaxDepth = 200
)

// rustV0 demangles a Rust v0 name ("_R" ...), printing it as rustc-demangle
// does in its alternate form: no crate disambiguators, generic arguments
// of paths in value position after "::".
func rustV0(name string) (out string, ok bool) {
	p := &v0{s: name[2:]}
	defer func() {
		if r := recover(); r != nil {
			if _, bad := r.(v0Error); !bad {
				panic(r)
			}
			out, ok = "", false
		}
	}()
	// An optional encoding version (decimal) precedes the path.
	if p.pos < len(p.s) && p.s[p.pos] >= '0' && p.s[p.pos] <= '9' {
		p.decimal()
	}
	p.path(true)
	// The instantiating crate is not printed.
	if p.pos < len(p.s) && p.s[p.pos] >= 'A' && p.s[p.pos] <= 'Z' {
		p.skip++
		p.path(false)
		p.skip--
	}
	suffix := p.s[p.pos:]
	if suffix != "" && suffix[0] != '.' {
		return "", false
	}
	// A "." suffix (".0", ".llvm.N": a compiler-made copy) is dropped, as
	// binutils does.
	return p.out.String(), true
}

type v0Error struct{}

// v0 is the state of one v0 demangling.
type v0 struct {
	s     string
	pos   int
	out   strings.Builder
	skip  int // >0 while parsing what is not printed
	depth int
	bound int // lifetimes bound by enclosing binders
}

func (p *v0) fail() { panic(v0Error{}) }

func (p *v0) print(s string) {
	if p.skip > 0 {
		return
	}
	if p.out.Len()+len(s) > rustMaxOut {
		p.fail()
	}
	p.out.WriteString(s)
}

func (p *v0) peek() byte {
	if p.pos >= len(p.s) {
		return 0
	}
	return p.s[p.pos]
}

func (p *v0) next() byte {
	if p.pos >= len(p.s) {
		p.fail()
	}
	c := p.s[p.pos]
	p.pos++
	return c
}

func (p *v0) eat(c byte) bool {
	if p.peek() == c {
		p.pos++
		return true
	}
	return false
}

func (p *v0) enter() {
	p.depth++
	if p.depth > rustMaxDepth {
		p.fail()
	}
}

// decimal parses <decimal-number> = "0" | [1-9] {[0-9]}.
func (p *v0) decimal() int {
	c := p.next()
	if c < '0' || c > '9' {
		p.fail()
	}
	if c == '0' {
		return 0
	}
	n := int(c - '0')
	for p.peek() >= '0' && p.peek() <= '9' {
		n = n*10 + int(p.next()-'0')
		if n > 1<<24 {
			p.fail()
		}
	}
	return n
}

// base62 parses <base-62-number> = {[0-9a-zA-Z]} "_": "_" is 0, and
// digits d give d+1.
func (p *v0) base62() uint64 {
	if p.eat('_') {
		return 0
	}
	var n uint64
	for {
		c := p.next()
		var d uint64
		switch {
		case c == '_':
			if n+1 == 0 {
				p.fail()
			}
			return n + 1
		case c >= '0' && c <= '9':
			d = uint64(c - '0')
		case c >= 'a' && c <= 'z':
			d = uint64(c-'a') + 10
		case c >= 'A' && c <= 'Z':
			d = uint64(c-'A') + 36
		default:
			p.fail()
		}
		hi, lo := bits.Mul64(n, 62)
		lo, carry := bits.Add64(lo, d, 0)
		if hi != 0 || carry != 0 {
			p.fail()
		}
		n = lo
	}
}

// disambiguator parses an optional "s" <base-62-number>: 0 when absent.
func (p *v0) disambiguator() uint64 {
	if !p.eat('s') {
		return 0
	}
	return p.base62() + 1
}

// ident parses <undisambiguated-identifier> = ["u"] <decimal> ["_"] <bytes>.
func (p *v0) ident() string {
	puny := p.eat('u')
	n := p.decimal()
	p.eat('_')
	if n > len(p.s)-p.pos {
		p.fail()
	}
	id := p.s[p.pos : p.pos+n]
	p.pos += n
	if puny {
		return punycode(id, p.fail)
	}
	return id
}

// backref runs fn at the position a "B" <base-62-number> names, which
// must be before the reference.
func (p *v0) backref(fn func()) {
	start := p.pos - 1
	i := p.base62()
	if i >= uint64(start) {
		p.fail()
	}
	p.enter()
	saved := p.pos
	p.pos = int(i)
	fn()
	p.pos = saved
	p.depth--
}

func (p *v0) path(inValue bool) {
	p.enter()
	defer func() { p.depth-- }()
	switch c := p.next(); c {
	case 'C':
		p.disambiguator()
		p.print(p.ident())
	case 'M', 'X':
		p.skip++
		p.disambiguator()
		p.path(false)
		p.skip--
		p.print("<")
		p.typ()
		if c == 'X' {
			p.print(" as ")
			p.path(false)
		}
		p.print(">")
	case 'Y':
		p.print("<")
		p.typ()
		p.print(" as ")
		p.path(false)
		p.print(">")
	case 'N':
		ns := p.next()
		if !(ns >= 'a' && ns <= 'z' || ns >= 'A' && ns <= 'Z') {
			p.fail()
		}
		p.path(inValue)
		dis := p.disambiguator()
		id := p.ident()
		if ns >= 'A' && ns <= 'Z' {
			p.print("::{")
			switch ns {
			case 'C':
				p.print("closure")
			case 'S':
				p.print("shim")
			default:
				p.print(string(ns))
			}
			if id != "" {
				p.print(":" + id)
			}
			p.print("#" + strconv.FormatUint(dis, 10) + "}")
		} else if id != "" {
			p.print("::" + id)
		}
	case 'I':
		p.path(inValue)
		if inValue {
			p.print("::")
		}
		p.print("<")
		p.genericArgs()
		p.print(">")
	case 'B':
		p.backref(func() { p.path(inValue) })
	default:
		p.fail()
	}
}

// genericArgs prints {<generic-arg>} "E", comma-separated.
func (p *v0) genericArgs() {
	for i := 0; !p.eat('E'); i++ {
		if i > 0 {
			p.print(", ")
		}
		switch {
		case p.eat('L'):
			p.lifetime(p.base62())
		case p.eat('K'):
			p.constant()
		default:
			p.typ()
		}
	}
}

var rustBasic = map[byte]string{
	'a': "i8", 'b': "bool", 'c': "char", 'd': "f64", 'e': "str", 'f': "f32",
	'h': "u8", 'i': "isize", 'j': "usize", 'l': "i32", 'm': "u32", 'n': "i128",
	'o': "u128", 's': "i16", 't': "u16", 'u': "()", 'v': "...", 'x': "i64",
	'y': "u64", 'z': "!", 'p': "_",
}

func (p *v0) typ() {
	p.enter()
	defer func() { p.depth-- }()
	c := p.next()
	if s, ok := rustBasic[c]; ok {
		p.print(s)
		return
	}
	switch c {
	case 'R', 'Q':
		p.print("&")
		if p.eat('L') {
			if lt := p.base62(); lt != 0 {
				p.lifetime(lt)
				p.print(" ")
			}
		}
		if c == 'Q' {
			p.print("mut ")
		}
		p.typ()
	case 'P':
		p.print("*const ")
		p.typ()
	case 'O':
		p.print("*mut ")
		p.typ()
	case 'A':
		p.print("[")
		p.typ()
		p.print("; ")
		p.constant()
		p.print("]")
	case 'S':
		p.print("[")
		p.typ()
		p.print("]")
	case 'T':
		n := 0
		p.print("(")
		for ; !p.eat('E'); n++ {
			if n > 0 {
				p.print(", ")
			}
			p.typ()
		}
		if n == 1 {
			p.print(",")
		}
		p.print(")")
	case 'F':
		p.binder(func() {
			unsafe := p.eat('U')
			abi := ""
			if p.eat('K') {
				if p.eat('C') {
					abi = "C"
				} else {
					abi = strings.ReplaceAll(p.ident(), "_", "-")
				}
			}
			if unsafe {
				p.print("unsafe ")
			}
			if abi != "" {
				p.print(`extern "` + abi + `" `)
			}
			p.print("fn(")
			for i := 0; !p.eat('E'); i++ {
				if i > 0 {
					p.print(", ")
				}
				p.typ()
			}
			p.print(")")
			if !p.eat('u') {
				p.print(" -> ")
				p.typ()
			}
		})
	case 'D':
		p.print("dyn ")
		p.binder(func() {
			for i := 0; !p.eat('E'); i++ {
				if i > 0 {
					p.print(" + ")
				}
				p.dynTrait()
			}
		})
		if !p.eat('L') {
			p.fail()
		}
		if lt := p.base62(); lt != 0 {
			p.print(" + ")
			p.lifetime(lt)
		}
	case 'B':
		p.backref(p.typ)
	default:
		p.pos--
		p.path(false)
	}
}

// binder parses an optional "G" <base-62-number> (that many lifetimes plus
// one, bound for fn), printing "for<'a, ...> ".
func (p *v0) binder(fn func()) {
	n := uint64(0)
	if p.eat('G') {
		n = p.base62() + 1
		if n > 1000 {
			p.fail()
		}
		p.print("for<")
		for i := uint64(0); i < n; i++ {
			if i > 0 {
				p.print(", ")
			}
			p.bound++
			p.lifetime(1)
		}
		p.print("> ")
	} else {
		fn()
		return
	}
	fn()
	p.bound -= int(n)
}

func (p *v0) lifetime(lt uint64) {
	if lt == 0 {
		p.print("'_")
		return
	}
	d := int64(p.bound) - int64(lt)
	if d < 0 {
		p.fail()
	}
	if d < 26 {
		p.print("'" + string(rune('a'+d)))
	} else {
		p.print("'_" + strconv.FormatInt(d, 10))
	}
}

// dynTrait prints a trait path with its associated type bindings
// ("Iterator<Item = u8>").
func (p *v0) dynTrait() {
	open := p.pathOpenGenerics()
	for p.eat('p') {
		if open {
			p.print(", ")
		} else {
			p.print("<")
			open = true
		}
		p.print(p.ident() + " = ")
		p.typ()
	}
	if open {
		p.print(">")
	}
}

// pathOpenGenerics prints a type-position path, leaving a final generic
// argument list open (no ">") so bindings can follow; it reports whether
// it did.
func (p *v0) pathOpenGenerics() bool {
	switch p.peek() {
	case 'B':
		p.pos++
		var open bool
		p.backref(func() { open = p.pathOpenGenerics() })
		return open
	case 'I':
		p.pos++
		p.enter()
		p.path(false)
		p.print("<")
		for i := 0; !p.eat('E'); i++ {
			if i > 0 {
				p.print(", ")
			}
			switch {
			case p.eat('L'):
				p.lifetime(p.base62())
			case p.eat('K'):
				p.constant()
			default:
				p.typ()
			}
		}
		p.depth--
		return true
	}
	p.path(false)
	return false
}

// constant prints a const generic argument: integers, bool, char and "_"
// (placeholder); anything else rejects the name.
func (p *v0) constant() {
	if p.eat('B') {
		p.backref(p.constant)
		return
	}
	c := p.next()
	if c == 'p' {
		p.print("_")
		return
	}
	neg := false
	switch c {
	case 'a', 's', 'l', 'x', 'n', 'i':
		neg = p.eat('n')
	case 'h', 't', 'm', 'y', 'o', 'j', 'b', 'c':
	default:
		p.fail()
	}
	start := p.pos
	for p.peek() != '_' {
		if !isHex(p.next()) {
			p.fail()
		}
	}
	hex := p.s[start:p.pos]
	p.pos++
	if len(hex) > 16 {
		p.print("0x" + hex)
		return
	}
	var v uint64
	if hex != "" {
		var err error
		if v, err = strconv.ParseUint(hex, 16, 64); err != nil {
			p.fail()
		}
	}
	switch c {
	case 'b':
		switch v {
		case 0:
			p.print("false")
		case 1:
			p.print("true")
		default:
			p.fail()
		}
	case 'c':
		if v > utf8.MaxRune || !utf8.ValidRune(rune(v)) {
			p.fail()
		}
		p.print(strconv.QuoteRuneToASCII(rune(v)))
	default:
		if neg {
			p.print("-")
		}
		p.print(strconv.FormatUint(v, 10))
	}
}

// punycode decodes Rust's punycode identifiers (RFC 3492 with "_" as the
// delimiter between the basic characters and the encoded insertions).
func punycode(s string, fail func()) string {
	var out []rune
	rest := s
	if i := strings.LastIndexByte(s, '_'); i >= 0 {
		for _, c := range s[:i] {
			out = append(out, c)
		}
		rest = s[i+1:]
	}
	const (
		base, tmin, tmax = 36, 1, 26
		skew, damp       = 38, 700
	)
	n, bias, i := 128, 72, 0
	adapt := func(delta, points int, first bool) int {
		if first {
			delta /= damp
		} else {
			delta /= 2
		}
		delta += delta / points
		k := 0
		for delta > ((base-tmin)*tmax)/2 {
			delta /= base - tmin
			k += base
		}
		return k + (base-tmin+1)*delta/(delta+skew)
	}
	for len(rest) > 0 {
		old, w := i, 1
		for k := base; ; k += base {
			if len(rest) == 0 {
				fail()
			}
			c := rest[0]
			rest = rest[1:]
			var d int
			switch {
			case c >= 'a' && c <= 'z':
				d = int(c - 'a')
			case c >= '0' && c <= '9':
				d = int(c-'0') + 26
			default:
				fail()
			}
			if d > (1<<30)/w {
				fail()
			}
			i += d * w
			t := k - bias
			if t < tmin {
				t = tmin
			} else if t > tmax {
				t = tmax
			}
			if d < t {
				break
			}
			w *= base - t
			if w > 1<<30 {
				fail()
			}
		}
		bias = adapt(i-old, len(out)+1, old == 0)
		n += i / (len(out) + 1)
		i %= len(out) + 1
		if n > utf8.MaxRune || len(out) > 1<<12 {
			fail()
		}
		out = append(out, 0)
		copy(out[i+1:], out[i:])
		out[i] = rune(n)
		i++
	}
	return string(out)
}
