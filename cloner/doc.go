// Package cloner is the Kubernetes side of csi-clone-sidecar: it knows the
// golden catalog and the worker disks cloned from it (CDI DataVolumes, PVCs,
// PVs, StorageClasses, VolumeSnapshotContents), joins them with what the CSI
// driver was really asked (sidecar.Observations), and decides one verdict per
// worker disk. Every replica persists the evidence it sees onto PVs and PVCs;
// only the leader decides verdicts, emits events and keeps the fetch ledger.
//
// Where things are decided:
//   - catalog.go  which DataVolumes are goldens and their flavor
//   - disks.go    which DataVolumes are worker disks
//   - classes.go  which StorageClass a disk or golden really has
//   - evidence.go what the driver was asked, persisted onto PVs/PVCs
//   - verdict.go  the verdict and findings of one worker disk (the only place
//     that decides; blocked.go holds its rules for clones a definite error
//     keeps from finishing, cdi.go how CDI's own signals are read, path.go
//     where a disk is while its claim is unbound: CDI's tmp-pvc-<uid>)
//   - ledger.go   counters that survive restarts and replicas
//   - report.go   the `report` subcommand
package cloner
