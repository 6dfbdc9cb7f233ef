package cluster

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// raceReport is what the race detector writes on the first line of a report.
const raceReport = "WARNING: DATA RACE"

// isSidecar tells whether a component is a csi-clone-sidecar replica
// (csi-clone-sidecar, csi-clone-sidecar-<n>).
func isSidecar(name string) bool {
	return name == sidecarName || strings.HasPrefix(name, sidecarName+"-")
}

// raceReports fails when a race-built sidecar reported a data race: the
// logs of every replica, all its restarts included (a restart appends),
// are read for the race detector's report.
func (c *Cluster) raceReports(names []string) error {
	var found []string
	for _, name := range names {
		if !isSidecar(name) {
			continue
		}
		log := c.procs[name].log
		n, err := countLines(log, raceReport)
		if err != nil {
			return err
		}
		if n > 0 {
			found = append(found, fmt.Sprintf("%s: %d (log: %s)", name, n, log))
		}
	}
	if len(found) > 0 {
		return fmt.Errorf("the race detector reported data races in the sidecar: %s", strings.Join(found, "; "))
	}
	return nil
}

// countLines counts the lines of a file that hold s.
func countLines(path, s string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	n := 0
	for sc.Scan() {
		if strings.Contains(sc.Text(), s) {
			n++
		}
	}
	return n, sc.Err()
}
