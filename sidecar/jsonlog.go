package sidecar

import (
	"encoding/json"
	"io"
	"log/slog"
	"sync"
)

// Observers fans one observation out to several observers, in order.
type Observers []Observer

// Observe implements Observer: each member gets the calls it selects.
func (os Observers) Observe(o Observation) {
	for _, ob := range os {
		if observes(ob)(o.Method) {
			ob.Observe(o)
		}
	}
}

// Observes implements MethodSelector: a method any member selects.
func (os Observers) Observes(method string) bool {
	for _, ob := range os {
		if observes(ob)(method) {
			return true
		}
	}
	return false
}

// JSONLines writes each observation as one JSON object per line: a debugging
// and test aid (--observations-log). Observations hold no secrets, so neither
// does the log.
type JSONLines struct {
	mu  sync.Mutex
	enc *json.Encoder
}

// NewJSONLines writes observations to w.
func NewJSONLines(w io.Writer) *JSONLines { return &JSONLines{enc: json.NewEncoder(w)} }

// Observe implements Observer.
func (j *JSONLines) Observe(o Observation) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.enc.Encode(o); err != nil {
		slog.Error("Failed to write an observation to the observations log", "err", err)
	}
}
