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

// diaryWords are how a lab notebook names who ran what: figures belong to a
// date and a commit, the history to git.
var diaryWords = regexp.MustCompile(`(?i)\bsessions? \d|\bsession-\d|\bwe ran\b|\bI ran\b|\bwe measured\b`)

// The README is for users: it opens with what the sidecar does for an
// operator in three lines, then how to install it and what it shows, then
// the two set-up commands for developers (`.ci/run` calls `make test`); at
// most about 250 lines; every docs/ page it links exists; and neither it
// nor docs/ keeps a diary.
func TestReadmeIsForUsers(t *testing.T) {
	raw, err := os.ReadFile(repoFile("README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	lines := strings.Split(strings.TrimRight(readme, "\n"), "\n")
	if len(lines) > 250 {
		t.Errorf("README.md has %d lines, want at most 250 (method and history go to docs/performance.md)", len(lines))
	}
	intro, _, _ := strings.Cut(strings.TrimPrefix(readme, lines[0]+"\n\n"), "\n\n")
	if n := len(strings.Split(intro, "\n")); n != 3 || !strings.Contains(intro, "passive observer") || !strings.Contains(intro, "verdict") {
		t.Errorf("README.md must open with three lines saying what it does for an operator (a passive observer, the verdicts); got %d:\n%s", n, intro)
	}
	var sections []string
	for _, m := range regexp.MustCompile(`(?m)^## (.*)$`).FindAllStringSubmatch(readme, 3) {
		sections = append(sections, m[1])
	}
	if len(sections) < 3 || sections[0] != "Install" || sections[1] != "What you will see" {
		t.Errorf("README.md's first sections are %q, want Install, What you will see, then the set-up commands", sections)
	}
	devBlock := regexp.MustCompile("(?s)```sh\n(make demo .*?)```").FindStringSubmatchIndex(readme)
	third := strings.Index(readme, "\n## "+sections[len(sections)-1]+"\n")
	if devBlock == nil || !strings.Contains(readme[devBlock[2]:devBlock[3]], "\nmake test ") ||
		devBlock[0] < third || strings.Contains(readme[third+1:devBlock[0]], "\n## ") {
		t.Errorf("README.md's third section must open with the block of `make demo` and `make test`")
	}
	for _, m := range regexp.MustCompile(`\]\((docs/[^)#]+)`).FindAllStringSubmatch(readme, -1) {
		if _, err := os.Stat(repoFile(m[1])); err != nil {
			t.Errorf("README.md links %s, which does not exist", m[1])
		}
	}
	docs, _ := filepath.Glob(repoFile("docs", "*.md"))
	for _, f := range append(docs, repoFile("README.md")) {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(raw), "\n") {
			if w := diaryWords.FindString(line); w != "" {
				t.Errorf("%s:%d says %q: name the date and commit instead", filepath.Base(f), i+1, w)
			}
		}
	}
}
