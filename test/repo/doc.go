// Package repo holds tests of the repository itself rather than of any
// program in it: what is tracked in git, and what the ignore files keep out
// of commits and image build contexts. Run them with `go test ./test/repo`.
package repo
