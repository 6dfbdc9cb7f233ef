package headless

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func renderFile(t *testing.T, page string) *Page {
	t.Helper()
	RequireChromium(t)
	path := filepath.Join(t.TempDir(), "page.html")
	if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	p, err := Render(ctx, "file://"+path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A clean page: its text, a 1280×800 screenshot, nothing wrong.
func TestRenderShowsTextAndTakesTheScreenshot(t *testing.T) {
	p := renderFile(t, `<!DOCTYPE html><html><body><h1>hello</h1><p>42 fetches avoided</p></body></html>`)
	if !strings.Contains(p.Text, "42 fetches avoided") || len(p.Problems) > 0 || len(p.Requests) > 0 {
		t.Fatalf("text %q, problems %q, requests %q", p.Text, p.Problems, p.Requests)
	}
	img, err := png.Decode(bytes.NewReader(p.PNG))
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != Width || b.Dy() != Height {
		t.Fatalf("screenshot %v, want %dx%d", b, Width, Height)
	}
}

// What a test must catch: a console error, an uncaught exception, a
// request for anything but the page.
func TestRenderReportsErrorsAndRequests(t *testing.T) {
	p := renderFile(t, `<!DOCTYPE html><html><body><p>broken</p>
<img src="http://127.0.0.1:9/x.png">
<script>console.error("boom"); undefinedFunction();</script></body></html>`)
	t.Logf("problems %q, requests %q", p.Problems, p.Requests)
	joined := strings.Join(p.Problems, "\n")
	for _, want := range []string{"boom", "undefinedFunction"} {
		if !strings.Contains(joined, want) {
			t.Errorf("problems lack %q: %q", want, p.Problems)
		}
	}
	if !slices.Contains(p.Requests, "http://127.0.0.1:9/x.png") {
		t.Errorf("requests %q lack the image", p.Requests)
	}
}
