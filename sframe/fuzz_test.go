package sframe_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"

	"github.com/rewindstack/rewind/sframe"
)

// FuzzParse feeds arbitrary bytes to Parse and, when they parse, runs
// every consumer: iteration, lookups at and around every FDE, the rows and
// all three dump styles. Nothing may panic, and lookups must agree with
// the FRE iteration. The seed corpus in testdata/fuzz/FuzzParse holds
// .sframe sections of the committed fixtures (v1, v2, v3, both byte
// orders, flexible FDEs).
func FuzzParse(f *testing.F) {
	for _, v := range []uint8{1, 2, 3} {
		f.Add(amd64Funcs(v, binary.LittleEndian).bytes(), uint64(0x1000))
		f.Add(amd64Funcs(v, binary.BigEndian).bytes(), uint64(0))
	}
	f.Fuzz(func(t *testing.T, data []byte, addr uint64) {
		s, err := sframe.Parse(data, addr, "fuzz")
		if err != nil {
			return
		}
		fres := 0
		for i := range s.FDEs() {
			fde := s.FDE(i)
			var fresOf []sframe.FRE
			increasing := true
			for e := range s.FREs(i) {
				fres++
				_ = s.RowOf(fde, &e)
				if n := len(fresOf); n > 0 && e.StartOffset <= fresOf[n-1].StartOffset {
					increasing = false
				}
				fresOf = append(fresOf, e)
			}
			// Where this FDE is the one found and its FREs ascend, the
			// lookup at an FRE's start returns that FRE's row.
			for _, e := range fresOf {
				pc := fde.Start + uint64(e.StartOffset)
				if increasing && !fde.PCMask() && s.FindFDE(pc) == i {
					if got, ok := s.Lookup(pc); !ok || got != s.RowOf(fde, &e) {
						t.Fatalf("Lookup(%#x) = %v %v, FRE says %v", pc, got, ok, s.RowOf(fde, &e))
					}
				}
			}
			for _, pc := range []uint64{fde.Start - 1, fde.Start, fde.Start + uint64(fde.Size)/2, fde.End() - 1, fde.End()} {
				row, ok := s.Lookup(pc)
				if ok {
					_ = row.String()
				}
			}
		}
		if fres != int(s.Header.NumFREs) {
			t.Fatalf("iterated %d FREs, header says %d", fres, s.Header.NumFREs)
		}
		for _, st := range []sframe.Style{sframe.StyleAuto, sframe.Readelf240, sframe.Readelf244, sframe.Readelf247} {
			_ = sframe.Dump(io.Discard, s, &sframe.DumpOptions{Style: st})
		}
		var b bytes.Buffer
		_ = sframe.Dump(&b, s, nil)
	})
}
