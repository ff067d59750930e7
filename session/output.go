package session

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rewindstack/rewind/profiles"
)

// Output says where WriteProfile writes a profile.
type Output struct {
	// Path is the file, whose extension names the format (.pb.gz,
	// .folded, .html, .svg); "-" is standard output, in Format;
	// os.DevNull discards the profile; "" is a new file named by Names.
	Path string
	// Format names the format of standard output: pprof, folded, html
	// or svg (see FormatExt).
	Format string
	// Names, for an empty Path, gives the candidate names: the first
	// that no file has is claimed (see profiles.Profile.WriteNewFile).
	Names func(i int) string
}

// formatExts maps the formats' names to the extensions that name them in
// file names.
var formatExts = map[string]string{"pprof": ".pb.gz", "folded": ".folded", "html": ".html", "svg": ".svg"}

// FormatExt returns the file extension of the format called name
// ("pprof", "folded", "html", "svg"), "" for an unknown name.
func FormatExt(name string) string { return formatExts[name] }

// DefaultNames returns the default names of a profile written at t, for
// Output.Names: rewind-TIME.html, then rewind-TIME-2.html and so on.
func DefaultNames(t time.Time) func(i int) string {
	base := "rewind-" + t.Format("20060102-150405")
	return func(i int) string {
		if i <= 1 {
			return base + ".html"
		}
		return base + "-" + strconv.Itoa(i) + ".html"
	}
}

// WriteProfile writes prof to out with opt and returns the path written
// ("-" for standard output, os.DevNull when discarded). A recording is not
// lost to an output problem: when the write fails, the profile is saved
// as folded stacks beside the file, else in the temporary directory, and
// the error says where it went.
func WriteProfile(prof *profiles.Profile, out Output, opt profiles.WriteOptions) (string, error) {
	switch out.Path {
	case os.DevNull:
		return out.Path, nil
	case "-":
		if err := writeStdout(prof, formatExts[out.Format], opt); err != nil {
			if alt, terr := saveInTemp(prof, formatExts[out.Format], opt); terr == nil {
				return "", fmt.Errorf("%w (the profile was saved as %s)", err, alt)
			}
			return "", err
		}
		return out.Path, nil
	}
	path, err := out.Path, error(nil)
	if path == "" {
		path, err = prof.WriteNewFile(out.Names, opt)
		if err != nil {
			path = out.Names(1) // (the format of the rescue's copy)
		}
	} else {
		err = prof.WriteFile(path, opt)
	}
	if err != nil {
		return "", rescueProfile(prof, out, path, opt, err)
	}
	return path, nil
}

// rescueProfile saves a profile whose write to path failed with err: as
// folded stacks beside it, else in the temporary directory; the error
// says where it went.
func rescueProfile(prof *profiles.Profile, out Output, path string, opt profiles.WriteOptions, err error) error {
	if !strings.HasSuffix(path, ".folded") && len(prof.Stacks) > 0 {
		folded := func(name string) string {
			return strings.TrimSuffix(strings.TrimSuffix(name, filepath.Ext(name)), ".pb") + ".folded"
		}
		alt, ferr := folded(path), error(nil)
		if out.Path == "" {
			alt, ferr = prof.WriteNewFile(func(i int) string { return folded(out.Names(i)) }, opt)
		} else {
			ferr = prof.WriteFile(alt, opt)
		}
		if ferr == nil {
			return fmt.Errorf("%w (the stacks were saved as %s)", err, alt)
		}
	}
	// The target's file system is full or gone: the temporary
	// directory is another one, most often.
	if len(prof.Stacks) > 0 {
		if alt, terr := saveInTemp(prof, path, opt); terr == nil {
			return fmt.Errorf("%w (the profile was saved as %s)", err, alt)
		}
	}
	return err
}

// writeStdout writes the profile to standard output in the format ext
// names: through a file in a temporary directory, since the formats are
// chosen by file name, then copied.
func writeStdout(prof *profiles.Profile, ext string, opt profiles.WriteOptions) error {
	dir, err := os.MkdirTemp("", "rewind-stdout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	name := filepath.Join(dir, "profile"+ext)
	if err := prof.WriteFile(name, opt); err != nil {
		return err
	}
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.Copy(os.Stdout, f); err != nil {
		return fmt.Errorf("writing the profile to standard output: %w", err)
	}
	return nil
}

// saveInTemp writes the profile that could not be written to out into
// the temporary directory ($TMPDIR, else /tmp), in out's format (folded
// for a name without one), under a new name it returns.
func saveInTemp(prof *profiles.Profile, out string, opt profiles.WriteOptions) (string, error) {
	ext := ".folded"
	for _, e := range []string{".pb.gz", ".html", ".svg"} {
		if strings.HasSuffix(out, e) {
			ext = e
		}
	}
	stem := "rewind-saved-" + time.Now().Format("20060102-150405")
	return prof.WriteNewFile(func(i int) string {
		if i > 1 {
			return filepath.Join(os.TempDir(), stem+"-"+strconv.Itoa(i)+ext)
		}
		return filepath.Join(os.TempDir(), stem+ext)
	}, opt)
}
