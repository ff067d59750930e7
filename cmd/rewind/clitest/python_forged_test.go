package clitest

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
)

// forged is a python3.11 process run from cpython/testdata/forge.py,
// whose structures the test overwrites through /proc/PID/mem, as the
// program itself could with ctypes: rewind runs as root against any
// process, and must stay bounded whatever that process's memory says.
type forged struct {
	p     *fixture.Proc
	facts map[string][]uint64
	mem   *os.File
}

func startForged(t *testing.T, depth, ncodes, bufsize int) *forged {
	t.Helper()
	const exe = "/usr/bin/python3.11"
	if _, err := os.Stat(exe); err != nil {
		t.Skipf("no %s: %v", exe, err)
	}
	script, err := filepath.Abs("../../../runtimes/cpython/testdata/forge.py")
	if err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(t.TempDir(), "report")
	p := fixture.Start(t, exe, script, report, strconv.Itoa(depth), strconv.Itoa(ncodes), strconv.Itoa(bufsize))
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	f := &forged{p: p, facts: map[string][]uint64{}}
	for _, line := range strings.Split(string(b), "\n") {
		fs := strings.Fields(line)
		if len(fs) < 2 {
			continue
		}
		for _, v := range fs[1:] {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatalf("report line %q: %v", line, err)
			}
			f.facts[fs[0]] = append(f.facts[fs[0]], n)
		}
	}
	if f.mem, err = os.OpenFile(fmt.Sprintf("/proc/%d/mem", p.PID), os.O_RDWR, 0); err != nil {
		t.Skipf("cannot write the process's memory: %v", err)
	}
	t.Cleanup(func() { f.mem.Close() })
	return f
}

func (f *forged) fact(t *testing.T, name string) uint64 {
	t.Helper()
	v := f.facts[name]
	if len(v) == 0 {
		t.Fatalf("forge.py reported no %s", name)
	}
	return v[0]
}

func (f *forged) write(t *testing.T, addr uint64, b []byte) {
	t.Helper()
	if _, err := f.mem.WriteAt(b, int64(addr)); err != nil {
		t.Fatalf("writing %d bytes at %#x: %v", len(b), addr, err)
	}
}

func (f *forged) put64(t *testing.T, addr, v uint64) {
	t.Helper()
	f.write(t, addr, binary.LittleEndian.AppendUint64(nil, v))
}

// bytesObject is a PyBytesObject header claiming n bytes of data.
func bytesObject(typ uint64, n int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, 1<<30) // ob_refcnt
	b = binary.LittleEndian.AppendUint64(b, typ)
	b = binary.LittleEndian.AppendUint64(b, uint64(n))
	return binary.LittleEndian.AppendUint64(b, ^uint64(0)) // ob_shash -1
}

// garbageTable is n bytes of a location table that decodes as entries
// (each starts with its top bit set) of no use to anyone.
func garbageTable(n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(1)).Read(b)
	for i := 0; i < n; i += 2 {
		b[i] |= 0x80
	}
	return b
}

// dumpBounded runs rewind dump args and checks it ends in bounded CPU
// time and memory (CPU, not wall time: a loaded machine stretches the
// wall clock, not the work), returning its output.
func dumpBounded(t *testing.T, args ...string) (string, string) {
	t.Helper()
	cmd := exec.Command(rewindBin, append([]string{"dump"}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("rewind dump %v: %v\n%s", args, err, errOut.String())
		}
	case <-time.After(5 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("rewind dump %v did not end in 5 minutes", args)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	rss := ru.Maxrss << 10
	t.Logf("rewind dump %v: %v of CPU, %d MiB peak RSS, %d bytes out; stderr:\n%s", args, cpu, rss>>20, out.Len(), errOut.String())
	if cpu > 5*time.Second {
		t.Errorf("rewind dump %v took %v of CPU, want <= 5s", args, cpu)
	}
	if rss > 300<<20 {
		t.Errorf("rewind dump %v peaked at %d MiB RSS, want <= 300", args, rss>>20)
	}
	return out.String(), errOut.String()
}

// TestDumpPythonForgedTable: 16,384 frames of one code object whose
// location table claims 1 MiB of garbage (a dump once decoded it for
// every frame: a minute).
func TestDumpPythonForgedTable(t *testing.T) {
	const claim = 1 << 20
	f := startForged(t, 16384, 0, claim+64)
	buf := f.fact(t, "BUFFER")
	f.write(t, buf, append(bytesObject(f.fact(t, "BYTES_TYPE"), claim), garbageTable(claim)...))
	f.put64(t, f.fact(t, "LINETABLE"), buf)
	out, _ := dumpBounded(t, strconv.Itoa(f.p.PID))
	if n := strings.Count(out, "[python]"); n < 16384 {
		t.Errorf("%d Python frames, want the 16,384 of rec and more", n)
	}
}

// TestDumpPythonForgedCodes: 500 code objects on the stack, each
// claiming its own 1 MiB location table (a dump once kept them all: a
// gigabyte).
func TestDumpPythonForgedCodes(t *testing.T) {
	const claim, n = 1 << 20, 500
	f := startForged(t, 10, n, n*32+claim+64)
	buf, typ := f.fact(t, "BUFFER"), f.fact(t, "BYTES_TYPE")
	f.write(t, buf+n*32, garbageTable(claim))
	slots := f.facts["CHAIN"]
	if len(slots) != n {
		t.Fatalf("forge.py reported %d chain slots, want %d", len(slots), n)
	}
	for i, s := range slots {
		// Headers 32 bytes apart, each claiming the megabyte after it.
		f.write(t, buf+uint64(i)*32, bytesObject(typ, claim))
		f.put64(t, s, buf+uint64(i)*32)
	}
	dumpBounded(t, strconv.Itoa(f.p.PID))
}

// TestDumpPythonForgedThreads: 65,536 thread states, each a copy of the
// main one and so sharing its 16,384-frame chain (a dump once read a
// gigabyte for them, and held the process stopped for a second or two
// re-reading them). The dump stays bounded, and its pause stays within
// three times --max-pause: the frames read before the pause are kept,
// not re-checked, when re-reading them would take longer.
func TestDumpPythonForgedThreads(t *testing.T) {
	const n, size = 65536, 512
	f := startForged(t, 16384, 0, n*size)
	buf, ts := f.fact(t, "BUFFER"), f.fact(t, "TSTATE")
	orig := make([]byte, size)
	if _, err := f.mem.ReadAt(orig, int64(ts)); err != nil {
		t.Fatal(err)
	}
	all := make([]byte, 0, n*size)
	for i := range n {
		c := append([]byte(nil), orig...)
		prev, next := buf+uint64(i-1)*size, buf+uint64(i+1)*size
		if i == 0 {
			prev = ts
		}
		if i == n-1 {
			next = 0
		}
		binary.LittleEndian.PutUint64(c[0:], prev)
		binary.LittleEndian.PutUint64(c[8:], next)
		all = append(all, c...)
	}
	f.write(t, buf, all)
	f.put64(t, f.fact(t, "NEXT"), buf)
	// The pause is also what the scheduler adds on a loaded machine: the
	// shortest of three dumps is compared.
	best := int64(-1)
	for range 3 {
		out, _ := dumpBounded(t, "--json", "--stop", "--max-pause", "10ms", strconv.Itoa(f.p.PID)) // --stop: the bound is of a pause
		var rep struct {
			PauseUS *int64 `json:"pause_us"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.PauseUS == nil {
			t.Fatalf("--json: no pause_us (%v)", err)
		}
		if best < 0 || *rep.PauseUS < best {
			best = *rep.PauseUS
		}
	}
	t.Logf("shortest pause %d us", best)
	if best > 30000 {
		t.Errorf("the shortest of 3 pauses was %d us, want <= 30000 (3 x --max-pause 10ms)", best)
	}
}

// TestDumpPythonForgedName: a code object whose qualified name is a
// "string" of 4,000 characters holding escape codes: the frame is kept,
// named <invalid name>, and none of those bytes are printed.
func TestDumpPythonForgedName(t *testing.T) {
	f := startForged(t, 3, 0, 4096)
	buf := f.fact(t, "BUFFER")
	// A compact ASCII PyASCIIObject (3.11): refcnt, type, length, hash,
	// state (kind 1, compact, ascii, ready), wstr; then the characters.
	o := binary.LittleEndian.AppendUint64(nil, 1<<30)
	o = binary.LittleEndian.AppendUint64(o, f.fact(t, "STR_TYPE"))
	o = binary.LittleEndian.AppendUint64(o, 4000)
	o = binary.LittleEndian.AppendUint64(o, ^uint64(0))
	o = binary.LittleEndian.AppendUint64(o, 0xe4)
	o = binary.LittleEndian.AppendUint64(o, 0)
	o = append(o, "\x1b[31mEVIL\x00\x07"...)
	f.write(t, buf, o)
	for _, s := range f.facts["QUALNAME"] {
		f.put64(t, s, buf)
	}
	for _, args := range [][]string{{strconv.Itoa(f.p.PID)}, {"--json", strconv.Itoa(f.p.PID)}} {
		out, _ := dumpBounded(t, args...)
		if strings.Contains(out, "EVIL") {
			t.Errorf("%v printed the forged name's bytes", args)
		}
		if args[0] != "--json" && !strings.Contains(out, "<invalid name>") {
			t.Errorf("%v: no <invalid name> frame:\n%s", args, out)
		}
		if args[0] == "--json" && !strings.Contains(out, `"function": null`) && !strings.Contains(out, `"function":null`) {
			t.Errorf("%v: no frame with a null function", args)
		}
	}
}
