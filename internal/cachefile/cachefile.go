// Package cachefile writes the files of rewind's persistent caches (unwind
// tables, DWARF indexes, kernel symbols) so that concurrent rewind
// processes never read a partial one.
package cachefile

import (
	"os"
	"path/filepath"
)

// Write stores data at path through a temporary file in the same directory
// and a rename, creating the directory (mode 0700) when needed: a reader
// sees the old file or the whole new one. On error nothing is left behind.
func Write(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
