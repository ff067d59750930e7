package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/internal/outfile"
	"github.com/rewindstack/rewind/internal/textesc"
	"github.com/rewindstack/rewind/sframe"
)

const sframeUsage = "usage: rewind sframe dump [--readelf 2.40|2.44|2.47] FILE...\n" +
	"       rewind sframe gen IN -o OUT [--version 1|2|3] [--separate [--addr ADDR]]"

func runSFrame(args []string) error {
	if len(args) > 0 && args[0] == "gen" {
		return runSFrameGen(args[1:])
	}
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help") {
		fmt.Println(sframeUsage) // asked for: an answer on stdout, exit 0
		return nil
	}
	if len(args) == 0 || args[0] != "dump" {
		return &usageError{err: errors.New("want a subcommand: dump or gen"), help: sframeUsage + "\n"}
	}
	fs := newFlags("sframe dump", `rewind sframe dump FILE...: print each file's .sframe section exactly as
readelf --sframe=.sframe of the binutils release that produces its SFrame
version prints it (2.40 for v1, 2.44 for v2, 2.47 for v3), or as the release
named by --readelf.`)
	style := fs.String("readelf", "", "print as binutils `RELEASE` does: 2.40, 2.44 or 2.47 (default: by version)")
	pos, err := parseArgs(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("need at least one FILE (rewind sframe dump --help lists the flags)")
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
		f, err := openELF(path)
		if err != nil {
			return err
		}
		sec, err := sframe.FromELF(f, path, ".sframe", true)
		f.Close()
		if err != nil {
			return err
		}
		if len(pos) > 1 {
			fmt.Printf("\nFile: %s\n", textesc.String(path))
		}
		if err := sframe.Dump(os.Stdout, sec, opt); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return nil
}

func runSFrameGen(args []string) error {
	fs := newFlags("sframe gen", `rewind sframe gen IN -o OUT: compile IN's .eh_frame (or .debug_frame) into
an .sframe section and write a copy of IN with the section added, as
objcopy --add-section does. The section is put in a new loadable segment with
a PT_GNU_SFRAME program header when the file allows it; otherwise it is added
unloaded, with a note saying why. Functions whose CFI SFrame cannot express
are left out and listed on stderr with the reason, as gas warns. A summary
goes to stdout.

With --separate, OUT gets only the section's bytes, encoded for the section
address given by --addr (0: a section that is not loaded).`)
	outPath := fs.String("o", "", "write the result to `FILE` (required; a file of that name is replaced but keeps its owner and mode, a link, FIFO or device is refused)")
	version := fs.Uint("version", 2, "SFrame `VERSION` to write: 2 (binutils 2.41-2.45 readelf), 3 (2.46+), or 1 (2.40)")
	separate := fs.Bool("separate", false, "write only the section's bytes")
	addr := fs.Uint64("addr", 0, "with --separate: the section address `ADDR` the bytes are encoded for")
	quiet := fs.Bool("q", false, "do not list skipped functions")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || *outPath == "" {
		return usagef("need one input FILE and -o OUT (rewind sframe gen --help lists the flags)")
	}
	if *version < 1 || *version > 3 {
		return fmt.Errorf("unsupported --version %d (want 1, 2 or 3)", *version)
	}
	if *addr != 0 && !*separate {
		return errors.New("--addr goes with --separate (the address of an added section is chosen for it)")
	}
	if err := outfile.Check(*outPath); err != nil {
		return fmt.Errorf("-o %w", err)
	}
	in := pos[0]
	gen := sframe.GenFileOptions{Version: uint8(*version), Separate: *separate, Addr: *addr}
	if !*quiet {
		gen.Generated = func(f *elfobj.File, g *sframe.Generated) { listSkipped(in, f, g) }
	}
	g, err := sframe.GenerateFile(in, *outPath, gen)
	if err != nil {
		return err
	}
	printGenSummary(*outPath, g)
	return nil
}

// listSkipped says on stderr which functions of in SFrame cannot express.
func listSkipped(in string, f *elfobj.File, g *sframe.Generated) {
	for _, s := range g.Stats.Skipped {
		name := ""
		if s.End > s.Start {
			if n, off, ok := f.Symbolize(s.Start); ok && off == 0 {
				name = n + " "
			}
		}
		fmt.Fprintf(os.Stderr, "rewind: %s: skipping SFrame FDE for %s%s\n", textesc.String(in), textesc.String(name), s)
	}
}

// printGenSummary prints what sframe gen wrote, against the CFI's size.
func printGenSummary(outPath string, g *sframe.GenFile) {
	st := g.Stats
	fmt.Printf("%s: SFrame v%d (%s) from %s: %d of %d functions, %d FDEs (%d PLT), %d FREs, %d skipped\n",
		outPath, g.Version, g.ABI, st.CFISource, st.Functions, st.CFIFDEs, st.FDEs, st.PLTs, st.FREs, len(st.Skipped))
	cfiBytes, secAddr, note := g.CFIBytes, g.Addr, g.Note
	ratio := ""
	if cfiBytes > 0 {
		ratio = fmt.Sprintf(" (%.1f%%)", 100*float64(g.Size())/float64(cfiBytes))
	}
	fmt.Printf(".sframe: %d bytes at %#x; .eh_frame + .eh_frame_hdr: %d bytes%s\n", g.Size(), secAddr, cfiBytes, ratio)
	if note != "" {
		fmt.Println("note: " + note)
	}
}
