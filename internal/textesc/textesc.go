// Package textesc makes strings that come from a target (thread names,
// symbol names, mapped paths, file names in debug information) safe to
// print on a terminal: rewind often runs as root, and a target that could
// put escape sequences in its output would control the operator's
// terminal (clear it, set its title, fake output, on some terminals
// inject input).
package textesc

import (
	"strings"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// safe reports whether byte c can be printed as it is when it is ASCII.
func safe(c byte) bool { return c >= 0x20 && c != 0x7f }

// String returns s with every C0 control byte (including newline and
// tab), DEL, C1 control character (U+0080-U+009F, which some terminals
// obey as escape sequences too) and byte of invalid UTF-8 written as
// \xNN. Other text, UTF-8 included, is unchanged; a string with nothing
// to escape is returned without copying.
func String(s string) string {
	i := 0
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			if !safe(c) {
				break
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || r >= 0x80 && r <= 0x9f {
			break
		}
		i += n
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			if safe(c) {
				b.WriteByte(c)
			} else {
				esc(&b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || r >= 0x80 && r <= 0x9f {
			for _, c := range []byte(s[i : i+n]) {
				esc(&b, c)
			}
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func esc(b *strings.Builder, c byte) {
	b.WriteString(`\x`)
	b.WriteByte(hexDigits[c>>4])
	b.WriteByte(hexDigits[c&15])
}
