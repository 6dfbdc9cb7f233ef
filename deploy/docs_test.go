package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var deployPath = regexp.MustCompile("(deploy/[A-Za-z0-9_./-]*[A-Za-z0-9_-])")

// Every deploy/... path the docs mention exists, so that a rename here breaks
// a test instead of the reader's copy-paste.
func TestDocsReferToExistingFiles(t *testing.T) {
	docs, _ := filepath.Glob(repoFile("docs", "*.md"))
	if len(docs) == 0 {
		t.Fatal("no docs/*.md")
	}
	for _, doc := range docs {
		raw, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(raw), "\n") {
			for _, loc := range deployPath.FindAllStringIndex(line, -1) {
				m := line[loc[0]:loc[1]]
				// `kubectl ... deploy/<name>` is a Deployment, not a path.
				if strings.Contains(line[:loc[0]], "kubectl") && !strings.ContainsAny(strings.TrimPrefix(m, "deploy/"), "/.") {
					continue
				}
				if _, err := os.Stat(repoFile(m)); err != nil {
					t.Errorf("%s mentions %s, which does not exist", filepath.Base(doc), m)
				}
			}
		}
	}
}
