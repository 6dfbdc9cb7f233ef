// Command noskip runs a `go test -json` command and prints what plain
// `go test` would (package results, and the output of tests that failed),
// then fails if any test skipped: `make test` runs every test or says which
// did not run. It exits with the command's status when that is not zero.
//
//	go run ./test/tools/noskip go test -json -count=1 ./...
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: noskip go test -json [flags] [packages]")
		os.Exit(2)
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "noskip:", err)
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "noskip:", err)
		os.Exit(2)
	}
	sum, readErr := summarize(out, os.Stdout)
	err = cmd.Wait()
	if readErr != nil {
		fmt.Fprintln(os.Stderr, "noskip: reading the test events:", readErr)
		os.Exit(2)
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		os.Exit(exit.ExitCode())
	case err != nil:
		fmt.Fprintln(os.Stderr, "noskip:", err)
		os.Exit(2)
	}
	fmt.Printf("noskip: %d tests ran, %d skipped\n", sum.ran, len(sum.skipped))
	if len(sum.skipped) > 0 {
		fmt.Println("noskip: skipped (no test may skip; a missing tool or device fails with a hint):")
		for _, s := range sum.skipped {
			fmt.Println("  " + s)
		}
		os.Exit(1)
	}
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

type summary struct {
	ran     int
	skipped []string
}

// summarize prints package-level output as it comes and a test's output
// only if it fails, and counts the tests that ran and skipped.
func summarize(r io.Reader, w io.Writer) (summary, error) {
	var sum summary
	held := map[string]*strings.Builder{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Fprintln(w, sc.Text()) // not an event (a build error printed to stdout)
			continue
		}
		key := e.Package + " " + e.Test
		switch {
		case e.Test == "" && e.Action == "output" && e.Output != "PASS\n":
			fmt.Fprint(w, e.Output) // a passing package's "PASS" is what -json adds to plain go test's output
		case e.Test == "":
		case e.Action == "output":
			if held[key] == nil {
				held[key] = &strings.Builder{}
			}
			held[key].WriteString(e.Output)
		case e.Action == "fail":
			if b := held[key]; b != nil {
				fmt.Fprint(w, b.String())
			}
			delete(held, key)
			sum.ran++
		case e.Action == "skip":
			sum.skipped = append(sum.skipped, key)
			delete(held, key)
		case e.Action == "pass":
			delete(held, key)
			sum.ran++
		}
	}
	return sum, sc.Err()
}
