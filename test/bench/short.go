package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// result is what one mode measured for one kind over all rounds.
type result struct {
	latencies []time.Duration
	done      int64 // calls completed in throughput rounds
	elapsed   time.Duration
	sent      int64 // every call made, warm-ups included
}

// shortRun is the short mode: per kind, latency rounds and throughput
// rounds in every mode, the modes in a new random order each time.
type shortRun struct {
	opts    options
	kinds   []*kind
	modes   []*mode
	results map[*kind][]*result
}

func runShort(o options) error {
	r := &shortRun{opts: o, kinds: kinds(o.calls, o.largeCalls), results: map[*kind][]*result{}}
	t := newTally(r.kinds)
	if err := measureOn(o, t, r.measure); err != nil {
		return err
	}
	r.report(t)
	return nil
}

func (r *shortRun) measure(modes []*mode) error {
	r.modes = modes
	for _, k := range r.kinds {
		for range modes {
			r.results[k] = append(r.results[k], &result{})
		}
	}
	for _, k := range r.kinds { // warm connections, code paths and pools
		for mi, m := range r.modes {
			if _, err := r.sequential(k, m, r.results[k][mi], max(k.seq/10, 5)); err != nil {
				return err
			}
		}
	}
	for range r.opts.rounds {
		for _, k := range r.kinds {
			for _, mi := range rand.Perm(len(r.modes)) {
				lat, err := r.sequential(k, r.modes[mi], r.results[k][mi], k.seq)
				if err != nil {
					return err
				}
				r.results[k][mi].latencies = append(r.results[k][mi].latencies, lat...)
			}
			for _, mi := range rand.Perm(len(r.modes)) {
				if err := r.throughput(k, r.modes[mi], r.results[k][mi]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// sequential makes n calls one after another and returns their latencies.
func (r *shortRun) sequential(k *kind, m *mode, res *result, n int) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		err := k.call(context.Background(), m.client)
		lat = append(lat, time.Since(start))
		res.sent++
		if err != nil {
			return nil, fmt.Errorf("%s, %s: %w", m.name, k.label, err)
		}
	}
	return lat, nil
}

// throughput keeps opts.workers callers busy for opts.window and counts
// the calls they complete.
func (r *shortRun) throughput(k *kind, m *mode, res *result) error {
	var done atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(r.opts.window)
	for range r.opts.workers {
		wg.Go(func() {
			for time.Now().Before(stop) {
				if err := k.call(context.Background(), m.client); err != nil {
					once.Do(func() { first = fmt.Errorf("%s, %s: %w", m.name, k.label, err) })
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	res.done += done.Load()
	res.sent += done.Load()
	res.elapsed += time.Since(start)
	return first
}
