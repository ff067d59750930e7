package outfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/fsafe"
	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"golang.org/x/sys/unix"
)

// entries lists dir's names, to check no temporary file is left behind.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func noTemp(t *testing.T, dir string) {
	t.Helper()
	for _, n := range entries(t, dir) {
		if strings.HasSuffix(n, ".tmp") {
			t.Errorf("temporary file %s left in %s", n, dir)
		}
	}
}

func lstat(t *testing.T, path string) *unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

// withTimeout fails the test if f blocks (on a FIFO).
func withTimeout(t *testing.T, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("blocked (opened a FIFO?)")
	}
}

func TestNewFileMode(t *testing.T) {
	old := unix.Umask(0o027)
	defer unix.Umask(old)
	dir := t.TempDir()
	for _, perm := range []os.FileMode{0o666, 0o755} {
		p := filepath.Join(dir, fmt.Sprintf("new%o", perm))
		if err := WriteFile(p, []byte("new"), perm); err != nil {
			t.Fatal(err)
		}
		if st := lstat(t, p); st.Mode&0o7777 != uint32(perm&^0o027) {
			t.Errorf("%s: mode %#o, want %#o", p, st.Mode&0o7777, perm&^0o027)
		}
		if b, _ := os.ReadFile(p); string(b) != "new" {
			t.Errorf("%s = %q", p, b)
		}
	}
	noTemp(t, dir)
}

// TestReplaceKeepsMode checks that a replaced file keeps its permissions
// (not the new file's default) and gets the new contents.
func TestReplaceKeepsMode(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out")
	if err := os.WriteFile(p, []byte("old contents"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("new"), 0o755); err != nil {
		t.Fatal(err)
	}
	if st := lstat(t, p); st.Mode&0o7777 != 0o640 {
		t.Errorf("mode %#o, want the old file's 0640", st.Mode&0o7777)
	}
	if b, _ := os.ReadFile(p); string(b) != "new" {
		t.Errorf("contents %q", b)
	}
	noTemp(t, dir)
}

// TestRefusesSymlink checks that a symbolic link at the destination is
// neither followed nor replaced.
func TestRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "out")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	err := WriteFile(link, []byte("new"), 0o755)
	if !errors.Is(err, fsafe.ErrNotRegular) || !strings.Contains(err.Error(), link) || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("WriteFile(symlink) = %v, want a refusal naming it", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "precious" {
		t.Errorf("link target overwritten: %q", b)
	}
	if st := lstat(t, target); st.Mode&0o7777 != 0o600 {
		t.Errorf("link target's mode changed to %#o", st.Mode&0o7777)
	}
	if st := lstat(t, link); st.Mode&unix.S_IFMT != unix.S_IFLNK {
		t.Errorf("link replaced")
	}
	noTemp(t, dir)
}

// TestRefusesSymlinkAtCommit checks that a link planted while the file
// is written is refused too.
func TestRefusesSymlinkAtCommit(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "out")
	f, err := Create(p, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Abort()
	f.WriteString("new")
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
	if err := f.Commit(); !errors.Is(err, fsafe.ErrNotRegular) {
		t.Errorf("Commit over a planted link = %v", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "precious" {
		t.Errorf("link target overwritten: %q", b)
	}
	noTemp(t, dir)
}

func TestRefusesFIFOAndDirectory(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	withTimeout(t, func() {
		for _, p := range []string{fifo, sub} {
			err := WriteFile(p, []byte("new"), 0o666)
			if !errors.Is(err, fsafe.ErrNotRegular) || !strings.Contains(err.Error(), p) {
				t.Errorf("WriteFile(%s) = %v, want a refusal naming it", p, err)
			}
			if err := Check(p); !errors.Is(err, fsafe.ErrNotRegular) {
				t.Errorf("Check(%s) = %v", p, err)
			}
		}
	})
	if st := lstat(t, fifo); st.Mode&unix.S_IFMT != unix.S_IFIFO || st.Mode&0o7777 != 0o644 {
		t.Errorf("FIFO changed: mode %#o", st.Mode)
	}
	noTemp(t, dir)
}

// TestRefusesDevice writes over a copy of /dev/null: it must stay a
// device of mode 0644 (sframe gen made it crwxr-xr-x).
func TestRefusesDevice(t *testing.T) {
	dir := t.TempDir()
	dev := filepath.Join(dir, "null")
	if err := unix.Mknod(dev, unix.S_IFCHR|0o644, int(unix.Mkdev(1, 3))); err != nil {
		if errors.Is(err, unix.EPERM) {
			t.Skipf("mknod needs CAP_MKNOD: %v", err)
		}
		t.Fatal(err)
	}
	unix.Chmod(dev, 0o644) // whatever the umask
	withTimeout(t, func() {
		err := WriteFile(dev, []byte("new"), 0o755)
		if !errors.Is(err, fsafe.ErrNotRegular) || !strings.Contains(err.Error(), "character device") {
			t.Errorf("WriteFile(device) = %v, want a refusal", err)
		}
	})
	if st := lstat(t, dev); st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Mode&0o7777 != 0o644 || st.Rdev != unix.Mkdev(1, 3) {
		t.Errorf("device changed: mode %#o", st.Mode)
	}
	noTemp(t, dir)
}

// TestOtherUsersFileKeepsOwner has root replace another user's 0600
// file: the new file is that user's, mode 0600, not root's of the umask's
// mode.
func TestOtherUsersFileKeepsOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another user")
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "theirs")
	if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 65534, 65533); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("new"), 0o666); err != nil {
		t.Fatal(err)
	}
	st := lstat(t, p)
	if st.Uid != 65534 || st.Gid != 65533 || st.Mode&0o7777 != 0o600 {
		t.Errorf("replaced file: uid %d gid %d mode %#o, want 65534 65533 0600", st.Uid, st.Gid, st.Mode&0o7777)
	}
	if b, _ := os.ReadFile(p); string(b) != "new" {
		t.Errorf("contents %q", b)
	}
	noTemp(t, dir)
}

// TestOtherUsersFileRefused has an unprivileged user (nobody, in a child
// process) write over root's file in a directory it may write: it cannot
// give the new file root's owner, so it must refuse and leave the file.
func TestOtherUsersFileRefused(t *testing.T) {
	if p := os.Getenv("OUTFILE_HELPER_WRITE"); p != "" {
		if err := WriteFile(p, []byte("nobody's"), 0o666); err != nil {
			fmt.Println(err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a child as another user")
	}
	// A directory all may enter and write (not sticky: rename may
	// replace another user's file there), with a copy of this test
	// binary the child user can run.
	dir := t.TempDir()
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "helper")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "roots")
	if err := os.WriteFile(p, []byte("root's"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestOtherUsersFileRefused$")
	cmd.Env = append(os.Environ(), "OUTFILE_HELPER_WRITE="+p)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(string(out), "belongs to uid 0") {
		t.Errorf("child: %v\n%s\nwant a refusal", err, out)
	}
	if b, _ := os.ReadFile(p); string(b) != "root's" {
		t.Errorf("root's file replaced: %q", b)
	}
	if st := lstat(t, p); st.Uid != 0 || st.Mode&0o7777 != 0o644 {
		t.Errorf("root's file: uid %d mode %#o", st.Uid, st.Mode&0o7777)
	}
	os.Remove(bin)
	noTemp(t, dir)
}

// TestNoSpace fills a small tmpfs: the write fails, the old file is
// intact and no temporary file remains.
func TestNoSpace(t *testing.T) {
	dir := fixture.Tmpfs(t, 64<<10)
	p := filepath.Join(dir, "out")
	if err := os.WriteFile(p, []byte("old contents"), 0o644); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("x"), 1<<20)
	err := WriteFile(p, big, 0o644)
	if !errors.Is(err, unix.ENOSPC) || !strings.Contains(err.Error(), p) {
		t.Errorf("WriteFile on a full disk = %v, want ENOSPC naming %s", err, p)
	}
	if b, _ := os.ReadFile(p); string(b) != "old contents" {
		t.Errorf("old file damaged: %d bytes", len(b))
	}
	if _, err := WriteUnique(func(i int) string { return filepath.Join(dir, fmt.Sprintf("u%d", i)) }, 0o644,
		func(w io.Writer) error { _, err := w.Write(big); return err }); !errors.Is(err, unix.ENOSPC) {
		t.Errorf("WriteUnique on a full disk = %v", err)
	}
	if n := entries(t, dir); len(n) != 1 {
		t.Errorf("left in the full file system: %q", n)
	}
	// The space is back.
	if err := WriteFile(p, []byte("new"), 0o644); err != nil {
		t.Errorf("after ENOSPC: %v", err)
	}
}

// TestWriteUniqueConcurrent has many writers claim names of one pattern
// at once: each gets its own name and no file is lost.
func TestWriteUniqueConcurrent(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p-2.html"), []byte("earlier"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A link (even a dangling one) or a FIFO makes a name taken, not
	// an error.
	if err := os.Symlink(filepath.Join(dir, "nowhere"), filepath.Join(dir, "p.html")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "p-3.html"), 0o644); err != nil {
		t.Fatal(err)
	}
	name := func(i int) string {
		if i == 1 {
			return filepath.Join(dir, "p.html")
		}
		return filepath.Join(dir, fmt.Sprintf("p-%d.html", i))
	}
	const n = 40
	got := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			p, err := WriteUnique(name, 0o644, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "writer %d", i)
				return err
			})
			if err != nil {
				t.Error(err)
			}
			got[i] = p
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, p := range got {
		if seen[p] {
			t.Errorf("%s claimed twice", p)
		}
		seen[p] = true
		if b, _ := os.ReadFile(p); string(b) != fmt.Sprintf("writer %d", i) {
			t.Errorf("%s = %q, want writer %d's", p, b, i)
		}
	}
	if b, _ := os.ReadFile(name(2)); string(b) != "earlier" {
		t.Errorf("earlier file replaced: %q", b)
	}
	if e := entries(t, dir); len(e) != n+3 {
		t.Errorf("%d files, want %d", len(e), n+3)
	}
	if _, err := os.Lstat(filepath.Join(dir, "nowhere")); err == nil {
		t.Errorf("link followed")
	}
}

// TestCommitNoReplace checks the claim refuses an existing name (even a
// dangling symbolic link) and then takes a free one.
func TestCommitNoReplace(t *testing.T) {
	dir := t.TempDir()
	taken := filepath.Join(dir, "taken")
	if err := os.Symlink(filepath.Join(dir, "nowhere"), taken); err != nil {
		t.Fatal(err)
	}
	f, err := Create(filepath.Join(dir, "x"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Abort()
	f.WriteString("data")
	if err := f.CommitNoReplace(taken); !errors.Is(err, fs.ErrExist) {
		t.Errorf("CommitNoReplace(taken) = %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "nowhere")); err == nil {
		t.Errorf("link followed")
	}
	if err := f.CommitNoReplace("/elsewhere/y"); err == nil {
		t.Errorf("CommitNoReplace in another directory succeeded")
	}
	free := filepath.Join(dir, "free")
	if err := f.CommitNoReplace(free); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(free); string(b) != "data" {
		t.Errorf("free = %q", b)
	}
	noTemp(t, dir)
}

// BenchmarkWriteFile writes a 16 KiB file (a small flame graph) over
// an existing one: outfile (temporary file, fsync, rename) against
// os.WriteFile (truncate and write in place), in the test's temporary
// directory.
func BenchmarkWriteFile(b *testing.B) {
	data := bytes.Repeat([]byte("x"), 16<<10)
	p := filepath.Join(b.TempDir(), "out.html")
	b.Run("outfile", func(b *testing.B) {
		for b.Loop() {
			if err := WriteFile(p, data, 0o666); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("os.WriteFile", func(b *testing.B) {
		for b.Loop() {
			if err := os.WriteFile(p, data, 0o666); err != nil {
				b.Fatal(err)
			}
		}
	})
}
