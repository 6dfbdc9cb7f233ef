// Package record is the persisted form of a verdict: the Record written as
// JSON on a worker disk's PVC, its verdict words and bad reasons with their
// events and fixes, and the digest the PVC cache keeps of it in its place.
// Its encoding is a contract with people, `report` and older replicas: it
// changes only on purpose.
package record
