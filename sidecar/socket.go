package sidecar

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// maxSocketPath is the longest path bind(2) takes for a unix socket
// (sun_path holds 108 bytes with the terminating NUL).
const maxSocketPath = 107

// listenSocket listens on a new unix socket at path that has the given mode
// from the moment path names it. bind(2) creates the socket with the umask's
// mode, so it is bound inside a private directory beside path (0700, same
// filesystem), given its mode there, and only then linked to path. The
// returned FileInfo identifies the socket, so that Close removes path only
// while it is still ours.
func listenSocket(path string, mode os.FileMode, dialTimeout time.Duration) (*net.UnixListener, os.FileInfo, error) {
	if err := removeStaleSocket(path, dialTimeout); err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp(filepath.Dir(path), ".csi-clone-")
	if err != nil {
		return nil, nil, fmt.Errorf("failed to create a private directory next to %s: %w", path, err)
	}
	defer os.RemoveAll(dir)
	tmp := filepath.Join(dir, "s")
	if len(tmp) > maxSocketPath {
		return nil, nil, fmt.Errorf("failed to listen on %s: the path is too long to create the socket beside it as %s", path, tmp)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, nil, fmt.Errorf("failed to listen on %s: %w", path, err)
	}
	// The listener's own name disappears with dir; Close unlinks path itself.
	l.SetUnlinkOnClose(false)
	own, err := publishSocket(tmp, path, mode)
	if err != nil {
		l.Close()
		return nil, nil, err
	}
	return l, own, nil
}

// publishSocket sets the mode of the socket at tmp and links it to path.
func publishSocket(tmp, path string, mode os.FileMode) (os.FileInfo, error) {
	if err := os.Chmod(tmp, mode); err != nil {
		return nil, fmt.Errorf("failed to set mode %o on %s: %w", mode, path, err)
	}
	own, err := os.Lstat(tmp)
	if err != nil {
		return nil, fmt.Errorf("failed to inspect the new socket for %s: %w", path, err)
	}
	// link(2), not rename(2): it fails where rename would silently replace
	// whatever another process put at path since removeStaleSocket looked.
	if err := os.Link(tmp, path); err != nil {
		return nil, fmt.Errorf("failed to create socket %s: %w", path, err)
	}
	return own, nil
}

// removeStaleSocket clears path for a new socket. Only a socket nobody
// answers on (connection refused: its process is gone) is removed; a live
// one belongs to another process, and anything else may be someone's data.
func removeStaleSocket(path string, dialTimeout time.Duration) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("failed to inspect %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket; refusing to replace it", path)
	}
	c, err := net.DialTimeout("unix", path, dialTimeout)
	if err == nil {
		c.Close()
		return fmt.Errorf("another process is listening on %s; refusing to replace its socket", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("cannot tell whether another process is listening on %s, so not replacing it: %w", path, err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("failed to remove stale socket %s: %w", path, err)
	}
	return nil
}

// removeOwnSocket unlinks path if it still names the socket own describes: a
// successor that already put its own socket there keeps it.
func removeOwnSocket(path string, own os.FileInfo) error {
	fi, err := os.Lstat(path)
	if err != nil || !os.SameFile(fi, own) {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("failed to remove socket %s: %w", path, err)
	}
	return nil
}
