package traceback

import (
	"bufio"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Go prints a goroutine's pprof labels in its traceback header only with
// GODEBUG=tracebacklabels=1 (Go 1.26; the default from Go 1.27 for a main
// module that says go 1.27), and in a syntax that changed between the
// two releases (runtime/traceback.go, goroutineheader):
//
//	Go 1.26: goroutine 7 [chan receive, 1 minutes labels:{"k": "v"}]:
//	Go 1.27: goroutine 7 [chan receive, 1 minutes] {k: v, zone: "eu-west"}:
//
// Go 1.26 quotes every key and value (runtime.printquoted: printable ASCII
// as is, \n \r \t \\ \" escaped, other bytes below 0x7f as \xNN, other
// runes as \uNNNN or \UNNNNNNNN, a byte of invalid UTF-8 as the rune
// U+FFFD it decodes to). Go 1.27 quotes a key or value only when it holds
// a character outside [A-Za-z0-9./_], and prints a byte of invalid UTF-8
// as \xNN. Labels are printed in the order of the label set, which
// runtime/pprof keeps sorted by key.

// labelSyntax is the syntax a Go version prints labels in.
type labelSyntax int

const (
	labels126 labelSyntax = iota // inside the brackets, always quoted
	labels127                    // after the brackets, quoted when needed
)

// labelSyntaxOf returns the syntax of the Go version that built the
// target (runtime.buildVersion: "go1.26.8", "go1.27rc1", "devel go1.28-…").
// Versions before 1.26, which print no labels, get 1.26's; an unknown
// version gets the newest.
func labelSyntaxOf(goVersion string) labelSyntax {
	minor, ok := goMinor(goVersion)
	if ok && minor < 27 {
		return labels126
	}
	return labels127
}

// goMinor parses the minor version of a Go version string: 26 for
// "go1.26.8", "go1.26rc2" and "devel go1.26-abcdef".
func goMinor(v string) (int, bool) {
	i := strings.Index(v, "go1.")
	if i < 0 {
		return 0, false
	}
	v = v[i+len("go1."):]
	n := 0
	for n < len(v) && v[n] >= '0' && v[n] <= '9' {
		n++
	}
	minor, err := strconv.Atoi(v[:n])
	return minor, err == nil
}

// sortedLabels returns the label pairs in the order Go prints them.
func sortedLabels(labels map[string]string) []string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// writeLabels126 prints Go 1.26's " labels:{"k": "v", ...}" (inside the
// header's brackets).
func writeLabels126(w *bufio.Writer, labels map[string]string) {
	w.WriteString(" labels:{")
	for i, k := range sortedLabels(labels) {
		if i > 0 {
			w.WriteString(", ")
		}
		writeQuoted(w, k, false)
		w.WriteString(": ")
		writeQuoted(w, labels[k], false)
	}
	w.WriteByte('}')
}

// writeLabels127 prints Go 1.27's " {k: v, ...}" (after the header's
// brackets).
func writeLabels127(w *bufio.Writer, labels map[string]string) {
	w.WriteString(" {")
	for i, k := range sortedLabels(labels) {
		if i > 0 {
			w.WriteString(", ")
		}
		writeMaybeQuoted(w, k)
		w.WriteString(": ")
		writeMaybeQuoted(w, labels[k])
	}
	w.WriteByte('}')
}

// writeMaybeQuoted prints s as Go 1.27 prints a label: as it is when
// every character is in [A-Za-z0-9./_] (the empty string too), quoted
// otherwise.
func writeMaybeQuoted(w *bufio.Writer, s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '/' || c == '_') {
			writeQuoted(w, s, true)
			return
		}
	}
	w.WriteString(s)
}

// writeQuoted prints s quoted as the runtime's printquoted does; badBytes
// is Go 1.27's \xNN for a byte of invalid UTF-8 (Go 1.26 prints the
// U+FFFD it decodes to). The output is printable ASCII whatever s holds.
func writeQuoted(w *bufio.Writer, s string, badBytes bool) {
	const hex = "0123456789abcdef"
	w.WriteByte('"')
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 && badBytes {
			w.WriteString(`\x`)
			w.WriteByte(hex[s[i]>>4])
			w.WriteByte(hex[s[i]&15])
			i++
			continue
		}
		i += n
		switch {
		case r == '\n':
			w.WriteString(`\n`)
		case r == '\r':
			w.WriteString(`\r`)
		case r == '\t':
			w.WriteString(`\t`)
		case r == '\\' || r == '"':
			w.WriteByte('\\')
			w.WriteByte(byte(r))
		case r >= ' ' && r <= '~':
			w.WriteByte(byte(r))
		case r < 0x7f:
			w.WriteString(`\x`)
			w.WriteByte(hex[r>>4])
			w.WriteByte(hex[r&15])
		case r < 0x10000:
			w.WriteString(`\u`)
			for s := 12; s >= 0; s -= 4 {
				w.WriteByte(hex[(r>>s)&15])
			}
		default:
			w.WriteString(`\U`)
			for s := 28; s >= 0; s -= 4 {
				w.WriteByte(hex[(r>>s)&15])
			}
		}
	}
	w.WriteByte('"')
}
