package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/cozystack/csi-clone-sidecar/metrics"
	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

// With -relay-process the relays run in a process of their own. Measured
// on this 2-core VM that adds ~170 µs per call to every relay mode: the
// relay process sleeps between calls and is woken across processes twice
// per call, while direct (client and driver in the bench's process) is
// never woken so. A deployment pays one such hop for direct too, so the
// default keeps the relays in the bench's process.
const childFlag = "relay-child"

// childCounts is what the relay process's tap delivered, sent back to the
// bench when the relays are closed.
type childCounts struct {
	ByMethod map[string]int `json:"byMethod"`
	Decoded  map[string]int `json:"decoded"` // by the kind's volume name
}

// relayChild is the relay process: the tapped relay (metrics Recorder and
// a counting Observer, as the binary runs it) and the bare relay on the
// sockets of dir, until its stdin ends; then it closes them, which waits
// for every observation, and prints what the tap delivered.
func relayChild(dir string) error {
	t := newTally(append(kinds(1, 1), realistic("long", 1)))
	relays, err := startRelays(stackIn(dir), t)
	if err != nil {
		return err
	}
	var served sync.WaitGroup
	for _, r := range relays {
		served.Go(func() { r.Serve(context.Background()) })
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	for _, r := range relays {
		r.Close()
	}
	served.Wait()
	c := childCounts{ByMethod: t.byMethod, Decoded: map[string]int{}}
	for k, n := range t.decoded {
		c.Decoded[k.req.Name] = n
	}
	return json.NewEncoder(os.Stdout).Encode(c)
}

// startRelays makes the tapped and the bare relay of s, not yet serving.
func startRelays(s *stack, t *tally) ([]*sidecar.Relay, error) {
	var relays []*sidecar.Relay
	for _, cfg := range []sidecar.Config{
		{ListenPath: s.tapped, DriverPath: s.driver, Tap: true, Recorder: metrics.New(), Observer: t},
		{ListenPath: s.bare, DriverPath: s.driver},
	} {
		relay, err := sidecar.NewRelay(cfg)
		if err != nil {
			for _, r := range relays {
				r.Close()
			}
			return nil, fmt.Errorf("relay on %s: %w", cfg.ListenPath, err)
		}
		relays = append(relays, relay)
	}
	return relays, nil
}

// relayProcess is the bench's handle on the relay process.
type relayProcess struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startRelayProcess(dir string) (*relayProcess, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "-"+childFlag, filepath.Clean(dir))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &relayProcess{cmd: cmd, in: in, out: bufio.NewReader(out)}
	if line, err := p.out.ReadString('\n'); err != nil || line != "ready\n" {
		p.kill()
		return nil, fmt.Errorf("relay process did not start: %q %v", line, err)
	}
	return p, nil
}

// close ends the relay process and adds what its tap delivered to t.
func (p *relayProcess) close(t *tally) error {
	p.in.Close()
	var c childCounts
	decodeErr := json.NewDecoder(p.out).Decode(&c)
	if err := p.cmd.Wait(); err != nil {
		return fmt.Errorf("relay process: %w", err)
	}
	if decodeErr != nil {
		return fmt.Errorf("relay process counts: %w", decodeErr)
	}
	t.add(c)
	return nil
}

func (p *relayProcess) kill() {
	p.cmd.Process.Kill()
	p.cmd.Wait()
}
