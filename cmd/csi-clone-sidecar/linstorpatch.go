package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/cozystack/csi-clone-sidecar/deploy/linstorpatch"
)

// runLinstorPatch reads a LinstorCluster (JSON or YAML, as `kubectl get -o
// json` prints it) on stdin and prints the JSON patch that adds the sparse
// podTemplate of -f to its spec.csiController.podTemplate (docs/install.md).
func runLinstorPatch(args []string) error {
	return linstorPatch(args, os.Stdin, os.Stdout)
}

func linstorPatch(args []string, in io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("csi-clone-sidecar linstor-patch", flag.ContinueOnError)
	file := fs.String("f", "", "The podTemplate to add (deploy/linstor/podtemplate.yaml). Required.")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *file == "" {
		return errors.New("usage: kubectl get linstorcluster NAME -o json | csi-clone-sidecar linstor-patch -f deploy/linstor/podtemplate.yaml")
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
	ops, err := linstorpatch.Add(cluster, addition)
	if err != nil {
		meta, _ := cluster["metadata"].(map[string]any)
		return fmt.Errorf("LinstorCluster %v: %w", meta["name"], err)
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(ops)
}
