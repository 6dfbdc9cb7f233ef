// Package report is the `report` command: it lists the cluster's goldens,
// worker disks and the ledger once, judges the disks as the leader would,
// and prints the catalog, the flavors' counters, the bad disks and the
// predicted clone path of every golden on every class.
package report
