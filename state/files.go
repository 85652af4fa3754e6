package state

import (
	"bufio"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// WriteFileAtomic writes a file that must survive a crash: write streams the
// content into a temporary file beside path, which is fsynced, renamed to
// path, and the folder fsynced. On error the temporary file is removed and
// path is untouched. It returns the size and CRC-32C of what was written.
func WriteFileAtomic(path string, write func(w io.Writer) error) (size int64, crc uint32, err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp*")
	if err != nil {
		return 0, 0, fmt.Errorf("create temp for %q: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	h := crc32.New(castagnoli)
	cw := &countingWriter{w: io.MultiWriter(f, h)}
	bw := bufio.NewWriterSize(cw, 64<<10)
	if err = write(bw); err != nil {
		return 0, 0, fmt.Errorf("write %q: %w", path, err)
	}
	if err = bw.Flush(); err != nil {
		return 0, 0, fmt.Errorf("write %q: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return 0, 0, fmt.Errorf("sync %q: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return 0, 0, fmt.Errorf("close %q: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return 0, 0, fmt.Errorf("rename %q: %w", path, err)
	}
	if err = SyncDir(dir); err != nil {
		return 0, 0, err
	}
	return cw.n, h.Sum32(), nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// SyncDir fsyncs a folder, making the creation, rename or removal of its
// entries durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir %q: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir %q: %w", dir, err)
	}
	return nil
}

// MkdirSync creates dir and any missing parents, fsyncing the parent of each
// folder it created. Something other than a folder at dir is an error.
func MkdirSync(dir string) error {
	dir = filepath.Clean(dir)
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("create dir %q: it exists and is not a folder (mode %v)", dir, fi.Mode())
		}
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("stat %q: %w", dir, err)
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := MkdirSync(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create dir %q: %w", dir, err)
	}
	return SyncDir(parent)
}

// Checksum returns the size and CRC-32C of the file at path.
func Checksum(path string) (size int64, crc uint32, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	h := crc32.New(castagnoli)
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, 0, fmt.Errorf("read %q: %w", path, err)
	}
	return n, h.Sum32(), nil
}

// VerifyFiles checks that every file, relative to dir, exists with the size
// and CRC-32C recorded for it. A missing or mismatching file is an error
// naming it and wrapping ErrCorrupt.
func VerifyFiles(dir string, files []File) error {
	for _, f := range files {
		if !filepath.IsLocal(f.Path) {
			return fmt.Errorf("file %q: path leaves the checkpoint: %w", f.Path, ErrCorrupt)
		}
		size, crc, err := Checksum(filepath.Join(dir, f.Path))
		switch {
		case err != nil:
			return fmt.Errorf("file %q: %w: %v", f.Path, ErrCorrupt, err)
		case size != f.Size:
			return fmt.Errorf("file %q: size %d, want %d: %w", f.Path, size, f.Size, ErrCorrupt)
		case crc != f.CRC32C:
			return fmt.Errorf("file %q: crc32c %08x, want %08x: %w", f.Path, crc, f.CRC32C, ErrCorrupt)
		}
	}
	return nil
}
