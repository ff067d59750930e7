package main

import (
	"debug/elf"
	"fmt"
	"os"

	"github.com/rewindstack/rewind/sframe"
)

func runSFrame(args []string) error {
	if len(args) == 0 || args[0] != "dump" {
		return fmt.Errorf("usage: rewind sframe dump [--readelf 2.40|2.44|2.47] FILE...")
	}
	fs := newFlags("sframe dump", `rewind sframe dump FILE...: print each file's .sframe section exactly as
readelf --sframe=.sframe of the binutils release that produces its SFrame
version prints it (2.40 for v1, 2.44 for v2, 2.47 for v3), or as the release
named by --readelf.`)
	style := fs.String("readelf", "", "print as this binutils `release` does: 2.40, 2.44 or 2.47 (default: by version)")
	pos, err := parseArgs(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		fs.Usage()
		return fmt.Errorf("need at least one FILE")
	}
	opt := &sframe.DumpOptions{}
	switch *style {
	case "":
	case "2.40":
		opt.Style = sframe.Readelf240
	case "2.44":
		opt.Style = sframe.Readelf244
	case "2.47":
		opt.Style = sframe.Readelf247
	default:
		return fmt.Errorf("unknown --readelf %q (want 2.40, 2.44 or 2.47)", *style)
	}
	for _, path := range pos {
		f, err := elf.Open(path)
		if err != nil {
			return err
		}
		sec, err := sframe.FromELF(f, path, ".sframe", true)
		f.Close()
		if err != nil {
			return err
		}
		if len(pos) > 1 {
			fmt.Printf("\nFile: %s\n", path)
		}
		if err := sframe.Dump(os.Stdout, sec, opt); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return nil
}
