// Command mkinitramfs writes an initramfs (a cpio archive in the "newc"
// format, uncompressed) for scripts/verify-old-kernel.sh:
//
//	mkinitramfs OUT NAME=FILE...
//
// puts each FILE in the archive as /NAME (mode 0755), with /dev/console,
// which the kernel opens for init's output before any file system is
// mounted.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: mkinitramfs OUT NAME=FILE...")
		os.Exit(2)
	}
	if err := write(os.Args[1], os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "mkinitramfs:", err)
		os.Exit(1)
	}
}

func write(out string, files []string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	ino := 1
	entry := func(name string, mode, rmaj, rmin int, data []byte) {
		fmt.Fprintf(w, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
			ino, mode, 0, 0, 1, 0, len(data), 0, 0, rmaj, rmin, len(name)+1, 0)
		ino++
		w.WriteString(name + "\x00")
		pad(w, 110+len(name)+1)
		w.Write(data)
		pad(w, len(data))
	}
	entry("dev", 0o040755, 0, 0, nil)
	entry("dev/console", 0o020600, 5, 1, nil)
	for _, nf := range files {
		name, file, ok := strings.Cut(nf, "=")
		if !ok {
			return fmt.Errorf("%q: want NAME=FILE", nf)
		}
		data, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		entry(name, 0o100755, 0, 0, data)
	}
	entry("TRAILER!!!", 0, 0, 0, nil)
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// pad writes the zeros that bring n bytes to a multiple of four.
func pad(w *bufio.Writer, n int) {
	for ; n%4 != 0; n++ {
		w.WriteByte(0)
	}
}
