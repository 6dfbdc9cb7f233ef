package main

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// window is one measured wave, from its first create to the end of its
// clean-up: the requests its clones caused, the late verdict writes
// included.
type window struct{ from, to time.Time }

// printRequests prints, per mode and per clone, the API requests that
// kube-apiserver audited of the service accounts in the CSI namespace (the
// sidecar's and the kubernetes-csi sidecars'): what the sidecar's verdict
// engine adds to the stack's work, to read the ratio against.
func printRequests(c *cluster.Cluster, windows map[string][]window, clones int) error {
	reqs, err := c.SidecarRequests()
	if err != nil {
		return fmt.Errorf("reading the audit log: %w", err)
	}
	for _, m := range []string{modeSidecar, modeDirect} {
		counts := map[string]int{}
		for _, r := range reqs {
			if !inAny(windows[m], r.Time) {
				continue
			}
			key := r.Verb + " " + r.Resource
			if r.Subresource != "" {
				key += "/" + r.Subresource
			}
			counts[serviceAccount(r.User)+": "+key]++
		}
		keys := make([]string, 0, len(counts))
		for k := range counts {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s %.2f", k, float64(counts[k])/float64(clones))
		}
		if len(parts) == 0 {
			parts = []string{"none"}
		}
		fmt.Printf("%-7s  API requests per clone of the CSI namespace's service accounts: %s\n", m, strings.Join(parts, ", "))
	}
	return nil
}

func inAny(ws []window, t time.Time) bool {
	for _, w := range ws {
		if !t.Before(w.from) && !t.After(w.to) {
			return true
		}
	}
	return false
}

// serviceAccount shortens system:serviceaccount:<ns>:<name> to its name.
func serviceAccount(user string) string {
	if i := strings.LastIndexByte(user, ':'); i >= 0 {
		return user[i+1:]
	}
	return user
}
