package csidriver

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// copyMethod names how a clone's data was made, for the log.
type copyMethod string

const (
	copyReflink copyMethod = "reflink"
	copySparse  copyMethod = "sparse-copy"
	copyBlank   copyMethod = "blank"
)

// createBlank makes a sparse file of size bytes at path via path.tmp, so a
// crash never leaves a half-made data file under the real name.
func createBlank(path string, size int64) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	return finishFile(f, tmp, path, err)
}

// cloneData makes dst a copy of src grown to size bytes. It shares extents
// with FICLONE where the filesystem can (btrfs, XFS with reflink), and
// otherwise copies only the data regions so holes stay holes.
func cloneData(src, dst string, size int64) (copyMethod, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return "", err
	}
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return "", err
	}
	method := copyReflink
	err = unix.IoctlFileClone(int(out.Fd()), int(in.Fd()))
	if err != nil && reflinkUnsupported(err) {
		method, err = copySparse, sparseCopy(out, in, fi.Size())
	}
	if err == nil && size > fi.Size() {
		err = out.Truncate(size)
	}
	return method, finishFile(out, tmp, dst, err)
}

// reflinkUnsupported is true for the errors FICLONE gives when the filesystem
// (ext4, tmpfs) or the pair of files cannot share extents.
func reflinkUnsupported(err error) bool {
	for _, e := range []error{unix.EOPNOTSUPP, unix.ENOTSUP, unix.EXDEV, unix.EINVAL, unix.ENOTTY, unix.ENOSYS} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// sparseCopy copies the first n bytes of in to out, walking data regions with
// SEEK_DATA/SEEK_HOLE and skipping all-zero blocks inside them.
func sparseCopy(out, in *os.File, n int64) error {
	fd := int(in.Fd())
	for off := int64(0); off < n; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole remains; Truncate below makes it
		}
		if err != nil {
			// SEEK_DATA unsupported: treat the rest as data; zero skipping
			// still keeps the copy sparse.
			return copyRange(out, in, off, n-off)
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("seek hole: %w", err)
		}
		hole = min(hole, n)
		if data >= hole {
			break
		}
		if err := copyRange(out, in, data, hole-data); err != nil {
			return err
		}
		off = hole
	}
	return out.Truncate(n)
}

// copyRange copies [off, off+n) and leaves all-zero blocks unwritten.
func copyRange(out, in *os.File, off, n int64) error {
	buf := make([]byte, 1<<20)
	zero := make([]byte, len(buf))
	for n > 0 {
		chunk := buf[:min(int64(len(buf)), n)]
		if _, err := in.ReadAt(chunk, off); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if !bytes.Equal(chunk, zero[:len(chunk)]) {
			if _, err := out.WriteAt(chunk, off); err != nil {
				return err
			}
		}
		off += int64(len(chunk))
		n -= int64(len(chunk))
	}
	return nil
}

// finishFile syncs and closes f and renames tmp to final when all went well;
// otherwise it removes tmp and returns the first error.
func finishFile(f *os.File, tmp, final string, err error) error {
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// resizeData grows a data file; volumes never shrink.
func resizeData(path string, size int64) error {
	return os.Truncate(path, size)
}
