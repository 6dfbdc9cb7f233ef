// Package fleet is what the cloner knows of the world: the trimmed objects
// its informers keep, the catalog of goldens and their flavors, the worker
// disks, which StorageClass each really has, what CDI's conditions say and
// the CSI calls the tap saw per volume. It reads and indexes; it writes
// nothing to the API server.
package fleet
