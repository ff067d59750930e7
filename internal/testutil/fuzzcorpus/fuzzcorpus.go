// Package fuzzcorpus writes seed-corpus files in the format `go test -fuzz`
// reads from testdata/fuzz/FuzzXxx, so packages can regenerate their
// committed seeds from code.
package fuzzcorpus

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Write writes one corpus entry named name into dir (created if needed),
// holding values in the order of the fuzz function's arguments. Supported
// types: []byte, string, bool, int, uint16, uint64.
func Write(dir, name string, values ...any) error {
	var b strings.Builder
	b.WriteString("go test fuzz v1\n")
	for _, v := range values {
		switch v := v.(type) {
		case []byte:
			fmt.Fprintf(&b, "[]byte(%s)\n", strconv.Quote(string(v)))
		case string:
			fmt.Fprintf(&b, "string(%s)\n", strconv.Quote(v))
		case bool:
			fmt.Fprintf(&b, "bool(%v)\n", v)
		case int:
			fmt.Fprintf(&b, "int(%d)\n", v)
		case uint16:
			fmt.Fprintf(&b, "uint16(%d)\n", v)
		case uint64:
			fmt.Fprintf(&b, "uint64(%d)\n", v)
		default:
			return fmt.Errorf("fuzzcorpus: unsupported type %T", v)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644)
}

// Regenerate is for a package's corpus-writing test: it skips tb unless
// REWIND_WRITE_CORPUS=1, and returns a function that writes one entry into
// testdata/fuzz/<fuzzer> (see Write), failing tb on error.
func Regenerate(tb testing.TB, fuzzer string) func(name string, values ...any) {
	tb.Helper()
	if os.Getenv("REWIND_WRITE_CORPUS") != "1" {
		tb.Skip("set REWIND_WRITE_CORPUS=1 to regenerate the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", fuzzer)
	return func(name string, values ...any) {
		tb.Helper()
		if err := Write(dir, name, values...); err != nil {
			tb.Fatal(err)
		}
	}
}
