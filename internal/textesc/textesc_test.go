package textesc

import (
	"testing"
	"unicode/utf8"
)

func TestString(t *testing.T) {
	for in, want := range map[string]string{
		"":                           "",
		"main":                       "main",
		"std::vector<int>::push":     "std::vector<int>::push",
		"naïve/路径":                   "naïve/路径",
		"\x1b[2J\x1b]0;pw\x07":       `\x1b[2J\x1b]0;pw\x07`,
		"a\nb\tc\rd\x7f":             `a\x0ab\x09c\x0dd\x7f`,
		"csi\u009b31m":               `csi\xc2\x9b31m`,
		"bad\xffutf8\xc3":            `bad\xffutf8\xc3`,
		"/tmp/lib\x1b]8;;x\x1b\\.so": `/tmp/lib\x1b]8;;x\x1b\.so`,
	} {
		if got := String(in); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzString(f *testing.F) {
	f.Add("\x1b[2Jname\u009b")
	f.Fuzz(func(t *testing.T, s string) {
		out := String(s)
		if !utf8.ValidString(out) {
			t.Fatalf("String(%q) = %q is not valid UTF-8", s, out)
		}
		for _, r := range out {
			if r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f {
				t.Fatalf("String(%q) = %q keeps control %U", s, out, r)
			}
		}
	})
}
