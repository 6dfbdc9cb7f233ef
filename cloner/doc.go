// Package cloner is the Kubernetes side of csi-clone-sidecar: it knows the
// golden catalog and the worker disks cloned from it (CDI DataVolumes, PVCs,
// PVs, StorageClasses, VolumeSnapshotContents), joins them with what the CSI
// driver was really asked (sidecar.Observations), and decides one verdict per
// worker disk. Every replica persists the evidence it sees onto PVs and PVCs;
// only the leader decides verdicts, emits events and keeps the fetch ledger.
//
// This package is the Controller: its informers, loops and their wiring.
// What it knows, decides and writes lives below it (docs/architecture.md):
//   - fleet    what the informers keep: goldens and flavors, disks, classes,
//     CDI's conditions, the tap's evidence per volume
//   - verdict  the verdict and findings of one worker disk (the only place
//     that decides; pure)
//   - record   the persisted Record and its digest
//   - ledger   counters that survive restarts and replicas, the running tally
//   - publish  the verdict writes: what a write is made of and when it is due
//   - schedule which disks are judged next and what each was last judged
//   - evidence each replica's loop from the tap's calls to annotations
//   - report   the `report` subcommand
package cloner
