package cluster

import (
	"os/exec"
	"strings"
	"testing"
)

// The leak check sees a process this test process started and did not end.
func TestLeakedSeesChildProcess(t *testing.T) {
	before, err := Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	after, err := Snapshot()
	cmd.Process.Kill()
	cmd.Wait()
	if err != nil {
		t.Fatal(err)
	}
	err = before.Leaked(after)
	if err == nil || !strings.Contains(err.Error(), "sleep") {
		t.Fatalf("Leaked = %v, want the sleep process", err)
	}
	final, err := Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := before.Leaked(final); err != nil {
		t.Fatalf("after Wait: %v", err)
	}
}
