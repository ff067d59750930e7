package cpython

import (
	"regexp"
	"slices"
	"testing"
)

// TestPyNameAsRegexp holds pyName to the regular expression it replaces,
// on names that match it and names that nearly do.
func TestPyNameAsRegexp(t *testing.T) {
	re := regexp.MustCompile(`^(lib)?python3\.(\d+)(t?)(d?)(\.so.*)?$`)
	names := []string{
		"python3.11", "python3.13t", "python3.12d", "python3.13td", "python3.14dt",
		"libpython3.12.so.1.0", "libpython3.14t.so", "libpython3.13td.so.1.0",
		"python3", "python3.", "python3.x", "python3.11x", "python3.11.so\n",
		"python3.11.so.1\nx", "libpython3.11", "liblibpython3.11", "python3.11.s",
		"python3.11t.sox", "python2.7", "ipython3.11", "python3.011", "python3.11.so",
		"libpython3.12.so", "python3.1234567890", "", "lib", "python3.11tt",
	}
	for _, n := range names {
		if got, want := pyName(n), re.FindStringSubmatch(n); !slices.Equal(got, want) {
			t.Errorf("pyName(%q) = %q, the regular expression gives %q", n, got, want)
		}
	}
}
