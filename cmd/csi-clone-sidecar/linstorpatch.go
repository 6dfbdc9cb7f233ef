package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/cozystack/csi-clone-sidecar/deploy/linstorpatch"
)

// runLinstorPatch reads a LinstorCluster (JSON or YAML, as `kubectl get -o
// json` prints it) on stdin and prints the JSON patch that adds the sparse
// podTemplate of -f to its spec.csiController.podTemplate (docs/install.md),
// unless Helm or Flux owns it and --force is not given.
func runLinstorPatch(args []string) error {
	return linstorPatch(args, os.Stdin, os.Stdout)
}

func linstorPatch(args []string, in io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("csi-clone-sidecar linstor-patch", flag.ContinueOnError)
	file := fs.String("f", "", "The podTemplate to add (deploy/linstor/podtemplate.yaml). Required.")
	force := fs.Bool("force", false, "Patch a LinstorCluster that Helm or Flux owns anyway: the owner's next upgrade removes the sidecar again.")
	if err := parseFlags(lookupCommand("linstor-patch"), fs, args); err != nil {
		return err
	}
	if *file == "" {
		return &usageError{lookupCommand("linstor-patch"), errors.New("-f is required")}
	}
	var addition, cluster map[string]any
	raw, err := os.ReadFile(*file)
	if err == nil {
		err = yaml.Unmarshal(raw, &addition)
	}
	if err != nil {
		return fmt.Errorf("-f %s: %w", *file, err)
	}
	raw, err = io.ReadAll(in)
	if err == nil {
		err = yaml.Unmarshal(raw, &cluster)
	}
	if err != nil || cluster == nil {
		return fmt.Errorf("reading the LinstorCluster on stdin: %v", err)
	}
	meta, _ := cluster["metadata"].(map[string]any)
	if owners := linstorpatch.Owners(cluster); len(owners) > 0 && !*force {
		return fmt.Errorf("LinstorCluster %v is owned by %s: its next upgrade renders the podTemplate again and removes the sidecar. "+
			"Add the sidecar through the owner's chart instead (on Cozystack: docs/cozystack.md, the lasting install), or pass --force to patch it until then",
			meta["name"], strings.Join(owners, ", "))
	}
	ops, err := linstorpatch.Add(cluster, addition)
	if err != nil {
		return fmt.Errorf("LinstorCluster %v: %w", meta["name"], err)
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(ops)
}
