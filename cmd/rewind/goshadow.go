package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rewindstack/rewind/goshadow"
)

// runGoshadow implements `rewind goshadow overlay [-o DIR]`.
func runGoshadow(args []string) error {
	if len(args) == 0 || args[0] != "overlay" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Print(goshadowUsage)
			return nil
		}
		return &usageError{err: errors.New("want a subcommand: overlay"), help: "\n" + goshadowUsage}
	}
	fs := newFlags("goshadow overlay", "rewind goshadow overlay [-o DIR]: write a Go build overlay that adds software\n"+
		"shadow stacks (gostack.ShadowCallers) to the runtime of the Go installed here,\nand print the flags to build with it.")
	out := fs.String("o", "", "output directory `DIR` (default: rewind-goshadow/GOVERSION in the user cache directory)")
	goroot := fs.String("goroot", "", "the Go installation `DIR` to patch (default: what 'go env GOROOT' prints)")
	pos, err := parseArgs(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("unexpected arguments %q", pos)
	}
	root := *goroot
	if root == "" {
		if root, err = goshadow.GOROOT(); err != nil {
			return err
		}
	}
	dir := *out
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return fmt.Errorf("no -o and no user cache directory: %w", err)
		}
		dir = filepath.Join(cache, "rewind-goshadow", goshadow.Version(root))
	}
	res, err := goshadow.Generate(root, dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "patched %s runtime (%s): %d files in %s\n", res.GoVersion, res.GOROOT, len(res.Files), res.Dir)
	fmt.Printf("go build %s -tags rewind_shadow ...\n", res.Flag())
	fmt.Printf("go test %s -tags rewind_shadow ...\n", res.Flag())
	return nil
}

const goshadowUsage = `Usage:
  rewind goshadow overlay [-o DIR] [--goroot DIR]

Writes patched copies of the Go runtime and DIR/overlay.json; build with
  go build -overlay=DIR/overlay.json -tags rewind_shadow
to get gostack.ShadowCallers, a frame-pointer capture backed by a per-goroutine
shadow stack.
`
