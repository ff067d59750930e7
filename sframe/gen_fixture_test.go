package sframe_test

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/sframe"
)

// TestGenReadelf checks generated sections against the real readelf of
// each version's binutils: testdata/gen holds, for x86-64 and AArch64
// libraries built without SFrame, the files `rewind sframe gen --version
// N` wrote and what readelf 2.40 (v1), 2.44 (v2) and 2.47 (v3) print for
// them (testdata/gen/make-gen-fixtures.sh, which also checked that those
// readelfs print no warning). Generating again must give the same file,
// byte for byte, and the dump of the regenerated section must be exactly
// readelf's text.
func TestGenReadelf(t *testing.T) {
	for _, arch := range []string{"x86_64", "aarch64"} {
		for _, v := range []uint8{1, 2, 3} {
			arch, v := arch, v
			t.Run(fmt.Sprintf("%s/v%d", arch, v), func(t *testing.T) {
				in := "testdata/gen/input-" + arch + ".so"
				ref := fmt.Sprintf("testdata/gen/gen-v%d-%s.so", v, arch)
				f, err := elfobj.Open(in)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				g, err := sframe.Generate(f, sframe.GenOptions{Version: v})
				if err != nil {
					t.Fatal(err)
				}
				raw, err := os.ReadFile(in)
				if err != nil {
					t.Fatal(err)
				}
				out, res, err := sframe.AddToELF(raw, g)
				if err != nil {
					t.Fatal(err)
				}
				want, err := os.ReadFile(ref)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(out, want) {
					t.Errorf("generating again does not give %s", ref)
				}
				data, _ := g.Encode(res.Addr)
				sec, err := sframe.Parse(data, res.Addr, ref+" .sframe")
				if err != nil {
					t.Fatal(err)
				}
				var dump strings.Builder
				if err := sframe.Dump(&dump, sec, nil); err != nil {
					t.Fatal(err)
				}
				text, err := os.ReadFile(ref + ".txt")
				if err != nil {
					t.Fatal(err)
				}
				if dump.String() != string(text) {
					t.Errorf("dump differs from readelf's %s.txt:\n%s\n---- readelf:\n%s", ref, dump.String(), text)
				}
			})
		}
	}
}
