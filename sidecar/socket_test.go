package sidecar_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

type inotifyEvent struct {
	mask uint32
	name string
}

// readInotify returns the events queued on a non-blocking inotify fd.
func readInotify(t *testing.T, fd int) []inotifyEvent {
	t.Helper()
	var events []inotifyEvent
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EAGAIN) {
			return events
		}
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off < n; {
			e := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(e.Len)]
			events = append(events, inotifyEvent{e.Mask, string(bytes.TrimRight(name, "\x00"))})
			off += unix.SizeofInotifyEvent + int(e.Len)
		}
	}
}

// TestSocketAppearsWithItsFinalMode watches the directory while the relay
// creates its socket. A file's mode changes only through chmod, which the
// watch reports as IN_ATTRIB on the name: no such event on the socket's name
// and the right mode afterwards mean it never had another mode there.
func TestSocketAppearsWithItsFinalMode(t *testing.T) {
	dir := t.TempDir()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_ATTRIB); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "relay.sock")
	r, err := sidecar.NewRelay(sidecar.Config{ListenPath: sock, DriverPath: filepath.Join(dir, "driver.sock"), SocketMode: 0o640})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if fi, err := os.Lstat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o640 {
		t.Fatalf("after NewRelay: %v, %v; want a socket with mode 0640", fi.Mode(), err)
	}
	appeared := false
	for _, e := range readInotify(t, fd) {
		if e.name != "relay.sock" {
			continue
		}
		if e.mask&unix.IN_ATTRIB != 0 {
			t.Errorf("%s changed attributes after it appeared (inotify mask %#x): it existed with another mode", sock, e.mask)
		}
		appeared = appeared || e.mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0
	}
	if !appeared {
		t.Error("no event for the socket's creation: the watch saw nothing")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "relay.sock" {
		t.Errorf("directory holds %v; want only relay.sock (no leftover temporary directory)", entries)
	}
}

func relayAt(sock string) sidecar.Config {
	return sidecar.Config{ListenPath: sock, DriverPath: filepath.Join(filepath.Dir(sock), "driver.sock")}
}

func TestStaleSocketIsReplaced(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "relay.sock")
	// What a killed previous run leaves: the file, and nobody listening.
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	r, err := sidecar.NewRelay(relayAt(sock))
	if err != nil {
		t.Fatalf("NewRelay over a stale socket: %v", err)
	}
	defer r.Close()
	go r.Serve(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.CheckListener(ctx); err != nil {
		t.Errorf("relay over a replaced stale socket: %v", err)
	}
}

func TestLiveSocketIsNotReplaced(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "relay.sock")
	other, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	r, err := sidecar.NewRelay(relayAt(sock))
	if err == nil {
		r.Close()
		t.Fatal("NewRelay took over a socket another process listens on")
	}
	if !strings.Contains(err.Error(), "another process is listening on "+sock) {
		t.Errorf("err = %v", err)
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("the other process's socket is gone: %v", err)
	}
	c.Close()
}

func TestNonSocketIsNotReplaced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relay.sock")
	if err := os.WriteFile(path, []byte("someone's data"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := sidecar.NewRelay(relayAt(path))
	if err == nil {
		r.Close()
		t.Fatal("NewRelay replaced a regular file")
	}
	if !strings.Contains(err.Error(), "is not a socket") {
		t.Errorf("err = %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "someone's data" {
		t.Errorf("the file now holds %q", b)
	}
}

func TestCloseRemovesOnlyItsOwnSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "relay.sock")
	r, err := sidecar.NewRelay(relayAt(sock))
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after Close: %v; want the socket removed", err)
	}

	if r, err = sidecar.NewRelay(relayAt(sock)); err != nil {
		t.Fatal(err)
	}
	// A successor replaced the socket while this relay was shutting down.
	os.Remove(sock)
	successor, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer successor.Close()
	r.Close()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("Close removed the successor's socket: %v", err)
	}
	c.Close()
}
