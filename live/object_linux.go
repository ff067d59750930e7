package live

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/target"
)

// OpenObject opens the object file mapped at path in the snapshot's
// process, in a way that works for processes in other mount namespaces
// (containers) and for files deleted or replaced since they were mapped:
//
//  1. /proc/PID/map_files/START-END of a mapping of path: the very file
//     that is mapped, whatever its name now (needs CAP_SYS_ADMIN or
//     CAP_CHECKPOINT_RESTORE, as root has);
//  2. /proc/PID/root/PATH: the path in the process's root directory;
//  3. PATH as this process sees it.
//
// A file found by path (2 and 3) whose inode is not the mapping's is not
// the mapped file (it was replaced) and is skipped. The returned file's
// Path is path. OpenObject has the signature of target.Objects.Open.
func (s *Snapshot) OpenObject(path string) (*elfobj.File, error) {
	return OpenMapped(s.PID, s.Maps, path)
}

// OpenMapped opens the object file mapped at path in process pid, whose
// mappings are maps (as /proc/PID/maps listed them, before a capture or in
// a snapshot), as Snapshot.OpenObject does.
func OpenMapped(pid int, maps []target.Mapping, path string) (*elfobj.File, error) {
	var m *target.Mapping
	for i := range maps {
		if maps[i].Path == path {
			m = &maps[i]
			break
		}
	}
	if m == nil {
		return nil, fmt.Errorf("live: %s is not mapped in process %d", path, pid)
	}
	var errs []error
	if f, err := elfobj.Open(fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.Start, m.End)); err == nil {
		f.Path = path
		return f, nil
	} else {
		errs = append(errs, err)
	}
	if m.Deleted {
		errs = append(errs, fmt.Errorf("%s was deleted after it was mapped", path))
		return nil, fmt.Errorf("live: cannot open %s of process %d: %w", path, pid, errors.Join(errs...))
	}
	for _, cand := range []string{fmt.Sprintf("/proc/%d/root%s", pid, path), path} {
		st, err := os.Stat(cand)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && m.Inode != 0 && sys.Ino != m.Inode {
			errs = append(errs, fmt.Errorf("%s: inode %d, but inode %d is mapped: the file was replaced", cand, sys.Ino, m.Inode))
			continue
		}
		f, err := elfobj.Open(cand)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		f.Path = path
		return f, nil
	}
	return nil, fmt.Errorf("live: cannot open %s of process %d: %w", path, pid, errors.Join(errs...))
}
