// Package verdict decides what became of each worker disk: from one disk's
// facts (its DataVolume, claim, volume, golden, the tap's evidence, CDI's
// conditions and words, the predicted clone path) to its Record. judge in
// verdict.go applies the rules in order; blocked.go holds those for clones
// a definite error keeps from finishing, path.go where a disk is while its
// claim is unbound. It is pure: no API client, no informer, no goroutine,
// and the clock is passed in.
package verdict
