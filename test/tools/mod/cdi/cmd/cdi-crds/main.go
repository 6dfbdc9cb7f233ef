// Command cdi-crds writes every CustomResourceDefinition of the pinned CDI
// release into a directory, one <name>.yaml per CRD, so the test harness can
// install them: the CDI module ships its CRDs only as Go strings.
//
//	cdi-crds DIR
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"kubevirt.io/containerized-data-importer/pkg/operator/resources"
)

func main() {
	if len(os.Args) != 2 || os.Args[1] == "" || os.Args[1][0] == '-' {
		fmt.Fprintln(os.Stderr, "usage: cdi-crds DIR (writes CDI's CRDs as DIR/<name>.yaml)")
		os.Exit(2)
	}
	if err := write(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "cdi-crds:", err)
		os.Exit(1)
	}
}

// write puts each CRD in its own file; sorted so the output is stable.
func write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	names := make([]string, 0, len(resources.CDICRDs))
	for name := range resources.CDICRDs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		path := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(path, []byte(resources.CDICRDs[name]), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}
