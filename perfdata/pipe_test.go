package perfdata

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/perftest"
)

// TestPipeMode reads a pipe-mode file (perf record -o - > FILE): its
// attributes come as records, and every sample perf counts is read.
func TestPipeMode(t *testing.T) {
	perf := perftest.RequirePerf(t)
	exe := perftest.BuildCPU(t, "-fomit-frame-pointer")
	data := filepath.Join(t.TempDir(), "pipe.data")
	out, err := os.Create(data)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(perf, "record", "-q", "-e", "cpu-clock", "-F", "499", "--call-graph", "dwarf,4096", "-o", "-", "--", exe, "0.5", "2")
	var msg strings.Builder
	cmd.Stdout, cmd.Stderr = out, &msg
	if err := cmd.Run(); err != nil {
		t.Skipf("perf record -o - cannot run here: %v\n%s", err, msg.String())
	}
	out.Close()
	f, err := Open(data)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	samples, withStack := 0, 0
	if err := f.Records(func(r *Record) error {
		if r.Type == RecordSample {
			samples++
			if len(r.Sample.Stack) > 0 {
				withStack++
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	stats, err := exec.Command(perf, "report", "--stats", "-i", data).Output()
	if err != nil {
		t.Fatalf("perf report --stats: %v", err)
	}
	m := regexp.MustCompile(`SAMPLE events:\s+(\d+)`).FindSubmatch(stats)
	if m == nil {
		t.Fatalf("no SAMPLE count in perf report --stats:\n%s", stats)
	}
	want, _ := strconv.Atoi(string(m[1]))
	if samples != want || want == 0 || withStack < want/2 {
		t.Errorf("%d samples (%d with a stack copy), perf report counts %d", samples, withStack, want)
	}
}

// testPipeFile builds a pipe-mode image of recs: the pipe header, a
// HEADER_ATTR record of testAttr with event id 7, the records.
func testPipeFile(recs [][]byte) []byte {
	attr := testAttr().Marshal()
	e := &enc{}
	e.u64(fileMagic)
	e.u64(pipeHeaderSize)
	e.u32(recordHeaderAttr)
	e.u16(0)
	e.u16(uint16(recordHeaderSize + len(attr) + 8))
	e.b = append(e.b, attr...)
	e.u64(7)
	for _, r := range recs {
		e.b = append(e.b, r...)
	}
	return e.b
}

// TestPipeModeSynthetic: the attribute record of a pipe-mode image
// describes its samples; an attribute record that lies about its size is
// an error, not a panic.
func TestPipeModeSynthetic(t *testing.T) {
	f, err := Parse(testPipeFile(testRecords()), "pipe")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Attrs) != 1 || f.IDs[7] != 0 || f.Attrs[0].SampleStackUser != 64 {
		t.Fatalf("attributes %+v, ids %v", f.Attrs, f.IDs)
	}
	samples := 0
	if err := f.Records(func(r *Record) error {
		if r.Type == RecordSample {
			samples++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if samples == 0 {
		t.Error("no sample read")
	}
	bad := testPipeFile(nil)
	binary.LittleEndian.PutUint32(bad[pipeHeaderSize+recordHeaderSize+4:], 1<<20) // attr.size
	if _, err := Parse(bad, "bad"); err == nil {
		t.Error("an attribute larger than its record was accepted")
	}
}
