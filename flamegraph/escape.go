package flamegraph

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// maxNameBytes caps how much of one frame name is written; longer names
// end with a note saying how many bytes were cut.
const maxNameBytes = 1024

// displayName turns an untrusted frame name into text that is valid in
// XML 1.0, HTML and SVG: invalid UTF-8 bytes become \xNN, control
// characters (C0, DEL, C1) become \xNN, the XML non-characters U+FFFE and
// U+FFFF and the bidirectional overrides (which could make a name read
// backwards) become \uNNNN. Names over maxNameBytes are cut at a rune
// boundary. The result still needs markup escaping (escapeText).
func displayName(s string) string {
	clean := len(s) <= maxNameBytes
	for i := 0; clean && i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				clean = false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if needsEscape(r, size) {
			clean = false
		}
		i += size
	}
	if clean {
		return s
	}
	var b strings.Builder
	i := 0
	for i < len(s) && b.Len() < maxNameBytes {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
			size = 1
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			fmt.Fprintf(&b, `\x%02x`, r)
		case needsEscape(r, size):
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	if i < len(s) {
		fmt.Fprintf(&b, "…[%d more bytes]", len(s)-i)
	}
	return b.String()
}

// needsEscape reports whether a decoded non-ASCII rune must not be written
// as is.
func needsEscape(r rune, size int) bool {
	switch {
	case r == utf8.RuneError && size <= 1: // invalid byte
		return true
	case r >= 0x80 && r < 0xa0: // C1 controls
		return true
	case r == 0xFFFE || r == 0xFFFF:
		return true
	case r >= 0x202A && r <= 0x202E, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// textEscaper escapes for both HTML and XML text and attribute values.
var textEscaper = strings.NewReplacer(
	"&", "&amp;",
	"<", "&lt;",
	">", "&gt;",
	`"`, "&quot;",
	"'", "&#39;",
)

// escapeText makes already displayable text (see displayName) safe as the
// content of an element or a quoted attribute value in HTML and XML.
func escapeText(s string) string { return textEscaper.Replace(s) }

// fitLabel shortens name to what fits in width pixels at the font used for
// frame labels, the way flamegraph.pl does ("name.." or nothing).
func fitLabel(name string, width float64) string {
	chars := int((width - 6) / (fontSize * 0.59))
	if chars < 3 {
		return ""
	}
	n := utf8.RuneCountInString(name)
	if n <= chars {
		return name
	}
	cut := 0
	for k := 0; k < chars-2; k++ {
		_, size := utf8.DecodeRuneInString(name[cut:])
		cut += size
	}
	return name[:cut] + ".."
}
