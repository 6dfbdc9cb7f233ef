package main

// usage.go is what the binary says about itself: the commands, their
// one-paragraph usage and examples, and the flags in groups. A usage error
// (an unknown command, flag or argument) exits 2 with the usage line on
// stderr; help asked for (help, -h, --help) prints the whole usage on stdout
// and exits 0.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"k8s.io/klog/v2"
)

const binaryName = "csi-clone-sidecar"

// command is one subcommand of the binary.
type command struct {
	name string
	// synopsis is the usage line after the binary's name.
	synopsis string
	// about is the one paragraph help prints under the synopsis.
	about    string
	examples []string
	// groups names, in order, the headings the command's flags go under.
	groups []flagGroup
	run    func(args []string) error
}

// flagGroup is one heading of a command's flags.
type flagGroup struct {
	title string
	names []string
}

var (
	groupDataPath = flagGroup{"Data path", []string{"csi-address", "listen-address", "listen-socket-mode", "tap", "observation-queue", "observations-log"}}
	groupVerdicts = flagGroup{"Verdicts", []string{"verdicts", "golden-namespace", "stuck-after", "resync-period", "evidence-grace", "evidence-ttl",
		"evidence-queue", "ledger-namespace", "ledger-name", "factory-image-bytes", "admission-params",
		"admission-allow-class-mismatch"}}
	groupHealth = flagGroup{"Metrics and health", []string{"http-endpoint", "metrics-address", "metrics-path", "health-probe-interval", "enable-pprof"}}
	groupLeader = flagGroup{"Leader election", []string{"leader-election", "leader-election-namespace", "leader-election-lease-duration",
		"leader-election-renew-deadline", "leader-election-retry-period", "leader-election-labels"}}
	groupKube    = flagGroup{"Kubernetes client", []string{"kubeconfig", "kube-api-qps", "kube-api-burst"}}
	groupOutput  = flagGroup{"Output", []string{"o", "predict"}}
	groupPatch   = flagGroup{"Patch", []string{"f", "force"}}
	groupVersion = flagGroup{"Version", []string{"version"}}
)

// commands are the binary's subcommands; serve is the default.
var commands []*command

func init() {
	commands = []*command{
		{
			name:     "serve",
			synopsis: "[serve] --listen-address=SOCKET --csi-address=SOCKET [flags]",
			about: `Runs the sidecar: one more container in the CSI controller pod. It relays every byte between
the CSI sidecars (csi-provisioner, csi-resizer, csi-snapshotter, which dial --listen-address)
and the driver (--csi-address), unchanged; a passive tap decodes a copy of the calls. With
Kubernetes access (--verdicts, the default) the elected leader joins them with CDI's DataVolumes
and writes a clone verdict on every worker disk's PVC; every replica serves metrics, /healthz
and /readyz on --http-endpoint. It never changes a byte of a relayed call and never blocks one.`,
			examples: []string{
				"csi-clone-sidecar --csi-address=/csi/csi.sock --listen-address=/csi/csi-clone.sock --http-endpoint=:9809 --leader-election",
				"csi-clone-sidecar --csi-address=/csi/csi.sock --listen-address=/csi/csi-clone.sock --verdicts=false   # relay and metrics only",
			},
			groups: []flagGroup{groupDataPath, groupVerdicts, groupHealth, groupLeader, groupKube, groupVersion},
			run:    runSidecar,
		},
		{
			name:     "report",
			synopsis: "report [--kubeconfig FILE] [-o table|json|html] [--predict CLASS]",
			about: `Prints what the verdicts say, read once from the cluster with read access only: per flavor the
golden, its consumers and the Image Factory fetches made and avoided; per pool the worker disks
by verdict; every bad disk with its reason and fix; goldens safe to delete; the predicted clone
path of the next disk; and the checks of the install (e.g. a GrafanaDashboard the chart left out).
-o html writes the same as one self-contained HTML page (no script, nothing fetched) to open
in a browser without Grafana.`,
			examples: []string{
				"csi-clone-sidecar report",
				"csi-clone-sidecar report -o json --ledger-namespace cozy-linstor",
				"csi-clone-sidecar report --predict replicated",
				"csi-clone-sidecar report -o html > report.html",
			},
			groups: []flagGroup{groupOutput, groupKube, groupVerdicts},
			run:    runReport,
		},
		{
			name:     "linstor-patch",
			synopsis: "linstor-patch -f PODTEMPLATE [--force] < LINSTORCLUSTER > PATCH",
			about: `Reads a LinstorCluster (YAML or JSON, as kubectl get prints it) on stdin and writes to stdout the
JSON patch (RFC 6902) that adds the sidecar of -f to its spec.csiController.podTemplate, guarded
by a test of what it read. It refuses, changing nothing, when the sidecar is there already, and
when Helm or Flux owns the LinstorCluster: the owner's next upgrade would remove the sidecar
again; add it through the owner's chart instead (on Cozystack: docs/cozystack.md), or pass --force.`,
			examples: []string{
				"kubectl get linstorcluster linstorcluster -o json \\\n      | csi-clone-sidecar linstor-patch -f deploy/linstor/podtemplate.yaml > add.json\n" +
					"    kubectl patch linstorcluster linstorcluster --type json --patch-file add.json",
			},
			groups: []flagGroup{groupPatch},
			run:    runLinstorPatch,
		},
		{
			name:     "version",
			synopsis: "version",
			about:    `Prints the version the binary was built as (also: --version).`,
			examples: []string{"csi-clone-sidecar version"},
			run:      runVersion,
		},
		{
			name:     "help",
			synopsis: "help [COMMAND]",
			about:    `Prints the commands, or one command's usage, flags and examples.`,
			examples: []string{"csi-clone-sidecar help report"},
			run:      runHelp,
		},
	}
}

func lookupCommand(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// usageError is a command line the binary does not understand: exit 2.
type usageError struct {
	cmd *command
	err error
}

func (e *usageError) Error() string { return e.err.Error() }

// helpShown is returned when help was asked for and printed: exit 0.
var helpShown = errors.New("help shown")

// dispatch runs the command args name and returns the exit code.
func dispatch(args []string, out, stderr io.Writer) int {
	stdout = out
	cmd, rest := commands[0], args
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		if cmd = lookupCommand(args[0]); cmd == nil {
			fmt.Fprintf(stderr, "%s: unknown command %q\n\n", binaryName, args[0])
			printOverview(stderr)
			return 2
		}
		rest = args[1:]
	}
	err := cmd.run(rest)
	var bad *usageError
	switch {
	case err == nil, errors.Is(err, helpShown):
		return 0
	case errors.As(err, &bad):
		fmt.Fprintf(stderr, "%s %s: %v\n", binaryName, bad.cmd.name, bad.err)
		fmt.Fprintf(stderr, "usage: %s %s\nRun '%s help %s' for its flags and examples.\n", binaryName, bad.cmd.synopsis, binaryName, bad.cmd.name)
		return 2
	default:
		fmt.Fprintf(stderr, "%s: %v\n", binaryName, err)
		return 1
	}
}

// parseFlags parses the flags of cmd; asked for help, it prints cmd's usage
// on stdout and returns helpShown.
func parseFlags(cmd *command, fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		printUsage(stdout, cmd, fs)
		return helpShown
	case err != nil:
		return &usageError{cmd, err}
	case fs.NArg() > 0:
		return &usageError{cmd, fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	return nil
}

// stdout is where help goes; a variable so that the commands print where
// dispatch's caller says.
var stdout io.Writer = os.Stdout

func runHelp(args []string) error {
	help := lookupCommand("help")
	fs := flag.NewFlagSet("help", flag.ContinueOnError)
	if err := parseFlags(help, fs, firstOnly(args)); err != nil {
		return err
	}
	switch {
	case len(args) == 0:
		printOverview(stdout)
		return nil
	case len(args) > 1:
		return &usageError{help, fmt.Errorf("unexpected argument %q", args[1])}
	case lookupCommand(args[0]) == nil:
		return &usageError{help, fmt.Errorf("unknown command %q", args[0])}
	}
	return lookupCommand(args[0]).run([]string{"--help"})
}

// firstOnly is args' first element if it is a flag (help's own -h), else
// nothing: help's arguments are command names.
func firstOnly(args []string) []string {
	if len(args) > 0 && strings.HasPrefix(args[0], "-") {
		return args[:1]
	}
	return nil
}

func runVersion(args []string) error {
	if err := parseFlags(lookupCommand("version"), flag.NewFlagSet("version", flag.ContinueOnError), args); err != nil {
		return err
	}
	fmt.Fprintln(stdout, binaryName, version)
	return nil
}

// printOverview lists the commands, one line each.
func printOverview(w io.Writer) {
	fmt.Fprintf(w, "%s: a passive observer beside a CSI driver that judges CDI's clones of golden images.\n\nUsage:\n", binaryName)
	for _, c := range commands {
		fmt.Fprintf(w, "  %s %s\n", binaryName, c.synopsis)
	}
	fmt.Fprintf(w, "\nRun '%s help COMMAND' for a command's flags and examples.\n", binaryName)
}

// printUsage prints cmd's synopsis (and, for serve, the other commands'),
// its paragraph, examples and flags by group.
func printUsage(w io.Writer, cmd *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: %s %s\n", binaryName, cmd.synopsis)
	if cmd == commands[0] {
		var others []string
		for _, c := range commands[1:] {
			others = append(others, c.name)
		}
		fmt.Fprintf(w, "       %s %s [COMMAND]\n", binaryName, strings.Join(others, " | "))
	}
	fmt.Fprintf(w, "\n%s\n", cmd.about)
	if len(cmd.examples) > 0 {
		fmt.Fprintln(w, "\nExamples:")
		for _, e := range cmd.examples {
			fmt.Fprintf(w, "    %s\n", e)
		}
	}
	printFlagGroups(w, cmd.groups, fs)
}

// printFlagGroups prints fs's flags under cmd's headings, klog's under one
// heading of their own, and any flag no heading names under "Other" (a test
// keeps that empty).
func printFlagGroups(w io.Writer, groups []flagGroup, fs *flag.FlagSet) {
	grouped := map[string]bool{}
	for _, g := range groups {
		var flags []*flag.Flag
		for _, name := range g.names {
			if f := fs.Lookup(name); f != nil {
				flags, grouped[name] = append(flags, f), true
			}
		}
		printFlags(w, g.title, flags)
	}
	var klogNames, rest []string
	klogSet := klogFlagNames()
	fs.VisitAll(func(f *flag.Flag) {
		switch {
		case grouped[f.Name]:
		case klogSet[f.Name]:
			klogNames = append(klogNames, "--"+f.Name)
		default:
			rest = append(rest, f.Name)
		}
	})
	if len(klogNames) > 0 {
		fmt.Fprintf(w, "\nLogging (klog's flags; --v=N sets the verbosity, 2 for decisions, 4 for every call):\n  %s\n",
			wrap(strings.Join(klogNames, " "), 96, "\n  "))
	}
	if len(rest) > 0 {
		printFlags(w, "Other", lookupAll(fs, rest))
	}
}

func printFlags(w io.Writer, title string, flags []*flag.Flag) {
	if len(flags) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s:\n", title)
	for _, f := range flags {
		typ, usage := flag.UnquoteUsage(f)
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		fmt.Fprintf(w, "  %s%s", dash, f.Name)
		if typ != "" {
			fmt.Fprintf(w, " %s", typ)
		}
		if !slices.Contains([]string{"", "0", "false", "0s"}, f.DefValue) {
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "\n        %s\n", wrap(usage, 92, "\n        "))
	}
}

func lookupAll(fs *flag.FlagSet, names []string) []*flag.Flag {
	var flags []*flag.Flag
	for _, n := range names {
		flags = append(flags, fs.Lookup(n))
	}
	return flags
}

// klogFlagNames are the flags klog.InitFlags registers.
func klogFlagNames() map[string]bool {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	names := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { names[f.Name] = true })
	return names
}

// wrap breaks s at spaces into lines of at most width, joined by sep.
func wrap(s string, width int, sep string) string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		if line != "" && len(line)+1+len(word) > width {
			lines, line = append(lines, line), word
			continue
		}
		line = strings.TrimPrefix(line+" "+word, " ")
	}
	return strings.Join(append(lines, line), sep)
}
