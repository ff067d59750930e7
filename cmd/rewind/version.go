package main

import (
	"fmt"
	"io"
	"runtime/debug"
)

// printVersion writes rewind's module version, the Go version it was built
// with and the VCS revision, all from the binary's build information.
func printVersion(w io.Writer) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintln(w, "rewind (no build information)")
		return
	}
	ver := bi.Main.Version
	if ver == "" {
		ver = "(devel)"
	}
	rev, modified, when := "unknown", "", ""
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = " (modified)"
			}
		case "vcs.time":
			when = " " + s.Value
		}
	}
	fmt.Fprintf(w, "rewind %s %s\n%s\nrevision %s%s%s\n", bi.Main.Path, ver, bi.GoVersion, rev, modified, when)
}
