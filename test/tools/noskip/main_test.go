package main

import (
	"strings"
	"testing"
)

func TestSummarizeCountsSkipsAndShowsOnlyFailures(t *testing.T) {
	stream := strings.Join([]string{
		`{"Action":"run","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"quiet pass\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"why it failed\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestB"}`,
		`{"Action":"output","Package":"p","Test":"TestC","Output":"--- SKIP\n"}`,
		`{"Action":"skip","Package":"p","Test":"TestC"}`,
		`{"Action":"output","Package":"q","Output":"PASS\n"}`,
		`{"Action":"output","Package":"p","Output":"FAIL\tp\t0.1s\n"}`,
		`{"Action":"fail","Package":"p"}`,
		`not json`,
	}, "\n")
	var out strings.Builder
	sum, err := summarize(strings.NewReader(stream), &out)
	if err != nil {
		t.Fatal(err)
	}
	if sum.ran != 2 || len(sum.skipped) != 1 || sum.skipped[0] != "p TestC" {
		t.Errorf("ran %d, skipped %q; want 2 and [p TestC]", sum.ran, sum.skipped)
	}
	if got, want := out.String(), "why it failed\nFAIL\tp\t0.1s\nnot json\n"; got != want {
		t.Errorf("printed %q, want %q", got, want)
	}
}
