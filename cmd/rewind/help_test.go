package main

import (
	"bytes"
	"flag"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// helpCommands are the command lines whose --help shows a flag set: every
// command of rewind's usage, with its subcommands.
var helpCommands = [][]string{
	{"demo"}, {"dump"}, {"table"}, {"sframe", "dump"}, {"sframe", "gen"},
	{"record"}, {"report"}, {"agent"}, {"goshadow", "overlay"},
}

// TestHelpPlaceholders walks every command's flags as --help prints them:
// a flag taking a value shows a placeholder naming it (-method METHOD,
// -unwind-in WHERE), never the flag package's type name (string, int,
// duration, value, float, uint) or a back-quoted word of the usage that
// is not one (-method fp); a boolean flag shows none. No help text names
// a source file. Every command of the usage is walked.
func TestHelpPlaceholders(t *testing.T) {
	for _, line := range strings.Split(usage, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "rewind" || strings.HasPrefix(f[1], "-") || strings.ToUpper(f[1]) == f[1] {
			continue
		}
		found := false
		for _, c := range helpCommands {
			found = found || c[0] == f[1]
		}
		if !found {
			t.Errorf("the usage names command %q, which this test does not walk", f[1])
		}
	}
	var sets []*flag.FlagSet
	var out bytes.Buffer
	flagsMade = func(fs *flag.FlagSet) {
		fs.SetOutput(&out)
		sets = append(sets, fs)
	}
	defer func() { flagsMade = nil }()
	sourceFile := regexp.MustCompile(`\b[A-Za-z0-9_]+\.go\b`)
	for _, c := range helpCommands {
		sets, out = nil, bytes.Buffer{}
		name := strings.Join(c, " ")
		if code := runArgs(c[0], append(append([]string(nil), c[1:]...), "--help")); code != 0 {
			t.Errorf("rewind %s --help: exit %d", name, code)
		}
		if len(sets) != 1 {
			t.Errorf("rewind %s --help made %d flag sets, want 1", name, len(sets))
			continue
		}
		if m := sourceFile.FindString(out.String()); m != "" {
			t.Errorf("rewind %s --help names the source file %q", name, m)
		}
		sets[0].VisitAll(func(f *flag.Flag) {
			ph, _ := flag.UnquoteUsage(f)
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
				if ph != "" {
					t.Errorf("rewind %s: boolean flag -%s shows a placeholder %q (a back-quoted word in its usage)", name, f.Name, ph)
				}
				return
			}
			if !isPlaceholder(ph) {
				t.Errorf("rewind %s: -%s shows %q, not a placeholder naming its value (back-quote one in the usage: `DIR`)", name, f.Name, ph)
			}
		})
	}
}

// isPlaceholder reports whether s reads as a value's placeholder: capital
// letters, digits and punctuation (FILE, KIND@ADDR, HOST:PORT, TID,...),
// no lower case (the flag package's type names, a word of the text).
func isPlaceholder(s string) bool {
	upper := false
	for _, r := range s {
		switch {
		case unicode.IsUpper(r):
			upper = true
		case unicode.IsLower(r), unicode.IsSpace(r):
			return false
		}
	}
	return upper
}
