// Package ledger keeps the counters that must survive restarts and
// replicas and never count a disk twice (Image Factory fetches avoided,
// bytes, golden imports, clone durations): the Ledger, the per-disk marks
// that make counting idempotent, and its shards, ConfigMaps read and
// written with optimistic concurrency.
package ledger
