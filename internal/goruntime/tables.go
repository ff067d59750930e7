package goruntime

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// versionTable is the layout of one Go release line (major.minor), for
// binaries without DWARF. Offsets were taken from the DWARF of binaries
// built by that release (TestTablesMatchDWARF checks the machine's).
type versionTable struct {
	version     string // "go1.26"
	g           GOffsets
	m           MOffsets
	labels      LabelLayout
	waitReasons []string
}

// tables maps each release line to its layout. It is made on first use:
// built at start, its literals cost every rewind command 0.15 ms.
var tables = sync.OnceValue(func() map[string]*versionTable {
	m := map[string]*versionTable{}
	for _, t := range []*versionTable{table122(), table123(), table124(), table125(), table126(), table127()} {
		m[t.version] = t
	}
	return m
})

// majorMinor returns "go1.N" of a version string ("go1.26.8",
// "go1.27rc1", "devel ..." -> "").
func majorMinor(v string) string {
	if !strings.HasPrefix(v, "go1.") {
		return ""
	}
	rest := v[len("go1."):]
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	if n == 0 {
		return ""
	}
	return "go1." + rest[:n]
}

func tableFor(version string) (*versionTable, bool) {
	t, ok := tables()[majorMinor(version)]
	return t, ok
}

func tableVersions() string {
	var vs []string
	for v := range tables() {
		vs = append(vs, v)
	}
	sort.Slice(vs, func(i, j int) bool {
		a, _ := strconv.Atoi(strings.TrimPrefix(vs[i], "go1."))
		b, _ := strconv.Atoi(strings.TrimPrefix(vs[j], "go1."))
		return a < b
	})
	return strings.Join(vs, ", ")
}

// ForVersion returns the layout the offset table gives for a Go version
// ("go1.26.8"), without the addresses of allgs (the caller sets AllGs).
func ForVersion(version string) (*Layout, error) {
	t, ok := tableFor(version)
	if !ok {
		return nil, fmt.Errorf("%w: no offset table for %s (tables cover %s)", ErrUnsupported, version, tableVersions())
	}
	return &Layout{GoVersion: version, Source: "table " + t.version, G: t.g, M: t.m, Labels: t.labels, WaitReasons: t.waitReasons}, nil
}
