// Package headless renders a page in Debian's Chromium, headless, as a
// person would see it: a screenshot, the text the browser laid out, and
// what went wrong on the way (console errors, uncaught exceptions, requests
// for anything but the page). Tests only; the binary never imports it.
package headless

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// Chromium is where Debian's chromium package installs the browser.
const Chromium = "/usr/bin/chromium"

// The viewport of every render.
const (
	Width  = 1280
	Height = 800
)

// Page is one render of a page.
type Page struct {
	// PNG is the viewport's screenshot, Width×Height.
	PNG []byte
	// Text is document.body.innerText: what the browser laid out as text.
	Text string
	// Problems are console errors, uncaught exceptions and log entries of
	// level error, in the order they came.
	Problems []string
	// Requests are the URLs the page asked for besides itself.
	Requests []string
}

// RequireChromium fails t, naming the fix, when Chromium is not installed.
// It never skips: `make test` runs every test.
func RequireChromium(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(Chromium); err != nil {
		t.Fatalf("%s: %v: install Debian's chromium package (make tools does: test/tools/packages.sh)", Chromium, err)
	}
}

// Render loads url in a fresh headless Chromium at Width×Height, waits for
// its load event, and returns what it showed.
func Render(ctx context.Context, url string) (*Page, error) {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(Chromium),
		chromedp.WindowSize(Width, Height),
		// Root in a container: Chromium's sandbox needs user namespaces
		// the test machines may not give it; the page is our own.
		chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()

	// Open the tab first, so that the listener misses none of the page's
	// events; the first Do starts the browser.
	if err := chromedp.Do(bctx); err != nil {
		return nil, fmt.Errorf("starting %s: %w", Chromium, err)
	}
	p := &Page{}
	// The listener runs on the tab's reader goroutine until the browser
	// stops: it notes into these, copied to p under mu when done.
	var (
		mu                 sync.Mutex
		problems, requests []string
	)
	note := func(list *[]string, s string) {
		mu.Lock()
		defer mu.Unlock()
		*list = append(*list, s)
	}
	err := chromedp.Listen(bctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
				var args []string
				for _, a := range ev.Args {
					args = append(args, strings.TrimSpace(string(a.Value)+" "+a.Description))
				}
				note(&problems, "console."+string(ev.Type)+": "+strings.Join(args, " "))
			}
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			text := d.Text
			if d.Exception != nil {
				text += " " + d.Exception.Description
			}
			note(&problems, fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber, text))
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.EntryLevelError {
				note(&problems, "log "+string(ev.Entry.Source)+": "+ev.Entry.Text+" "+ev.Entry.URL)
			}
		case *network.EventRequestWillBeSent:
			if ev.Request.URL != url {
				note(&requests, ev.Request.URL)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	err = chromedp.Do(bctx,
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := cdp.Call(ctx, t, log.Enable, cdp.Empty{})
			return err
		}),
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := cdp.Call(ctx, t, network.Enable, network.EnableParams{})
			return err
		}),
		chromedp.EmulateViewport(Width, Height),
		chromedp.Navigate(url),
	)
	if err == nil {
		p.Text, err = chromedp.Run(bctx, chromedp.Evaluate[string](`document.body.innerText`))
	}
	if err == nil {
		p.PNG, err = chromedp.Run(bctx, chromedp.CaptureScreenshot())
	}
	if err != nil {
		return nil, fmt.Errorf("rendering %s in %s: %w", url, Chromium, err)
	}
	mu.Lock()
	defer mu.Unlock()
	p.Problems, p.Requests = slices.Clone(problems), slices.Clone(requests)
	return p, nil
}
