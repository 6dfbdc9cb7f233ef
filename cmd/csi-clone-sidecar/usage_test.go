package main

import (
	"bytes"
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// runBinary runs this binary with args and returns its exit code, stdout
// and stderr.
func runBinary(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := sidecarCmd(args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Run()
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// serveFlags are the server's flags. registerFlags may run once per
// process: csi-lib-utils registers one flag on the global set too.
var serveFlags = sync.OnceValue(func() *flag.FlagSet {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	registerFlags(fs)
	return fs
})

// helpArgs are the ways to ask a command for its usage.
func helpArgs(c *command) [][]string {
	own := []string{c.name, "--help"}
	if c.name == "serve" {
		return [][]string{{"--help"}, {"-h"}, {"serve", "--help"}, {"help", "serve"}}
	}
	return [][]string{own, {c.name, "-h"}, {"help", c.name}}
}

// Every command, asked for help each way, prints its usage line, its
// paragraph and its examples on stdout and exits 0.
func TestEveryCommandExplainsItself(t *testing.T) {
	for _, c := range commands {
		for _, args := range helpArgs(c) {
			code, out, errOut := runBinary(t, args...)
			if code != 0 || errOut != "" {
				t.Errorf("%v: exit %d, stderr %q; want 0 and nothing on stderr", args, code, errOut)
			}
			for _, want := range []string{"Usage: csi-clone-sidecar " + c.synopsis + "\n", c.about, "Examples:\n    " + c.examples[0]} {
				if !strings.Contains(out, want) {
					t.Errorf("%v: stdout lacks %q:\n%s", args, want, out)
				}
			}
		}
	}
	code, out, _ := runBinary(t, "help")
	for _, c := range commands {
		if code != 0 || !strings.Contains(out, "  csi-clone-sidecar "+c.synopsis+"\n") {
			t.Errorf("help: exit %d, want 0 and a line for %s:\n%s", code, c.name, out)
		}
	}
}

// The server's --help names every other command on its usage line and puts
// every flag under a heading: its own groups, klog's under one, none under
// "Other". linstor-patch's says what it reads and writes.
func TestServerHelpGroupsTheFlags(t *testing.T) {
	_, out, _ := runBinary(t, "--help")
	if !strings.Contains(out, "\n       csi-clone-sidecar report | linstor-patch | version | help [COMMAND]\n") {
		t.Errorf("--help does not name the commands on its usage line:\n%s", out)
	}
	var got []string
	for _, h := range regexp.MustCompile(`(?m)^([A-Z][^:(\n]*)( \(.*)?:$`).FindAllStringSubmatch(out, -1) {
		got = append(got, h[1])
	}
	want := []string{"Examples", "Data path", "Verdicts", "Metrics and health", "Leader election", "Kubernetes client", "Version", "Logging"}
	if !slices.Equal(got, want) {
		t.Errorf("--help headings %q, want %q", got, want)
	}
	fs, klogNames := serveFlags(), klogFlagNames()
	fs.VisitAll(func(f *flag.Flag) {
		line := "\n  --" + f.Name + " "
		if klogNames[f.Name] {
			line = " --" + f.Name
		}
		if !strings.Contains(out+" ", line) && !strings.Contains(out, "\n  --"+f.Name+"\n") {
			t.Errorf("--help does not list --%s", f.Name)
		}
	})
	_, out, _ = runBinary(t, "linstor-patch", "--help")
	for _, want := range []string{"Reads a LinstorCluster (YAML or JSON", "on stdin", "writes to stdout the\nJSON patch", "kubectl patch linstorcluster"} {
		if !strings.Contains(out, want) {
			t.Errorf("linstor-patch --help lacks %q:\n%s", want, out)
		}
	}
}

// A command line the binary does not understand exits 2 with the reason
// and the usage on stderr and nothing on stdout.
func TestUsageErrorsExit2WithTheUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"bogus"}, []string{`unknown command "bogus"`, "Usage:\n  csi-clone-sidecar [serve]"}},
		{[]string{"--no-such-flag"}, []string{"flag provided but not defined: -no-such-flag", "usage: csi-clone-sidecar [serve]"}},
		{[]string{"--listen-address=/tmp/s", "extra"}, []string{`unexpected argument "extra"`, "usage: csi-clone-sidecar [serve]"}},
		{[]string{"--stuck-after=soon"}, []string{"invalid value", "usage: csi-clone-sidecar [serve]"}},
		{[]string{"report", "--no-such-flag"}, []string{"flag provided but not defined", "usage: csi-clone-sidecar report"}},
		{[]string{"report", "extra"}, []string{`unexpected argument "extra"`, "usage: csi-clone-sidecar report"}},
		{[]string{"report", "-o", "yaml"}, []string{`-o "yaml": want table, json or html`, "usage: csi-clone-sidecar report"}},
		{[]string{"report", "-o", "html", "--predict", "replicated"}, []string{"-o html does not go with --predict", "usage: csi-clone-sidecar report"}},
		{[]string{"linstor-patch"}, []string{"-f is required", "usage: csi-clone-sidecar linstor-patch"}},
		{[]string{"linstor-patch", "-x"}, []string{"flag provided but not defined", "usage: csi-clone-sidecar linstor-patch"}},
		{[]string{"version", "extra"}, []string{`unexpected argument "extra"`, "usage: csi-clone-sidecar version"}},
		{[]string{"help", "bogus"}, []string{`unknown command "bogus"`, "usage: csi-clone-sidecar help"}},
		{[]string{"help", "report", "extra"}, []string{`unexpected argument "extra"`, "usage: csi-clone-sidecar help"}},
	} {
		code, out, errOut := runBinary(t, tc.args...)
		if code != 2 || out != "" {
			t.Errorf("%v: exit %d, stdout %q; want 2 and nothing on stdout", tc.args, code, out)
		}
		for _, want := range tc.want {
			if !strings.Contains(errOut, want) {
				t.Errorf("%v: stderr lacks %q:\n%s", tc.args, want, errOut)
			}
		}
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		if code, out, errOut := runBinary(t, args...); code != 0 || out != "csi-clone-sidecar dev\n" || errOut != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 0 and the version", args, code, out, errOut)
		}
	}
}

// readmeFlag is a `--flag` in the first column of a README table row.
var readmeFlag = regexp.MustCompile("`--([a-z0-9_-]+)`")

// The README's flags table and the server's flags are the same set: every
// flag the binary registers is in the table, except klog's, which share one
// row that names klog; and every flag in the table is registered.
func TestReadmeFlagsTableMatchesTheBinary(t *testing.T) {
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(raw), "\n## Flags\n")
	section, _, _ = strings.Cut(section, "\n## ")
	fs, klogNames := serveFlags(), klogFlagNames()
	inTable, klogRows := map[string]bool{}, 0
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.HasPrefix(line, "| `") {
			continue
		}
		if strings.Contains(cells[1], "klog") {
			klogRows++
		}
		for _, m := range readmeFlag.FindAllStringSubmatch(cells[1], -1) {
			inTable[m[1]] = true
			if fs.Lookup(m[1]) == nil {
				t.Errorf("README's flags table lists --%s, which the binary does not register", m[1])
			}
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if !klogNames[f.Name] && !inTable[f.Name] {
			t.Errorf("the binary registers --%s, which README's flags table does not list", f.Name)
		}
	})
	if klogRows != 1 {
		t.Errorf("README's flags table has %d rows naming klog, want one for all of klog's flags", klogRows)
	}
}
