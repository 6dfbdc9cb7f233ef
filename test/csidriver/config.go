package csidriver

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Faults are injected by method short name ("CreateVolume", "Probe", ...).
type Faults struct {
	// Delay sleeps before the method runs (bounded by the caller's context).
	Delay map[string]time.Duration
	// Fail answers the method with this code instead of running it.
	Fail map[string]codes.Code
	// ExitAfter stops the driver once this many calls have finished; 0 never.
	ExitAfter int
	// FailClones answers the first FailClones.Times CreateVolume calls that
	// copy a volume or a snapshot with FailClones.Code, then runs them: a
	// driver short of room for a while, as the provisioner retries.
	FailClones FailFirst
}

// FailFirst fails the first Times calls with Code.
type FailFirst struct {
	Code  codes.Code
	Times int
}

// String is the flag's form, CODE:N.
func (f *FailFirst) String() string {
	if f == nil || f.Times == 0 {
		return ""
	}
	return fmt.Sprintf("%s:%d", f.Code, f.Times)
}

// Set parses --fail-clones CODE:N.
func (f *FailFirst) Set(v string) error {
	c, n, ok := strings.Cut(v, ":")
	times, err := strconv.Atoi(n)
	if !ok || err != nil || times <= 0 {
		return fmt.Errorf("fail-clones %q: want CODE:N with N > 0", v)
	}
	code, err := ParseCode(c)
	if err != nil {
		return fmt.Errorf("fail-clones %q: %v", v, err)
	}
	f.Code, f.Times = code, times
	return nil
}

var poolNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// Validate reports the first thing wrong with cfg, in one line.
func (c Config) Validate() error {
	if c.Endpoint == "" {
		return fmt.Errorf("endpoint is required")
	}
	if _, err := SocketPath(c.Endpoint); err != nil {
		return err
	}
	if c.StateDir == "" {
		return fmt.Errorf("state directory is required")
	}
	seen := map[string]bool{}
	for _, p := range c.Pools {
		if !poolNameRE.MatchString(p.Name) {
			return fmt.Errorf("pool name %q: want letters, digits, '.', '_', '-'", p.Name)
		}
		if seen[p.Name] {
			return fmt.Errorf("pool %q given twice", p.Name)
		}
		if p.CapacityBytes < 0 {
			return fmt.Errorf("pool %q: negative capacity", p.Name)
		}
		seen[p.Name] = true
	}
	if c.DefaultPool != "" && len(c.Pools) > 0 && !seen[c.DefaultPool] {
		return fmt.Errorf("default pool %q is not one of the pools", c.DefaultPool)
	}
	if c.DefaultPool != "" && len(c.Pools) == 0 && c.DefaultPool != DefaultPoolName {
		return fmt.Errorf("default pool %q is not one of the pools (none given: only %q exists)", c.DefaultPool, DefaultPoolName)
	}
	switch c.NodeLocalClone {
	case "", CloneHang, CloneFail:
	default:
		return fmt.Errorf("node-local clone mode %q: want %q or %q", c.NodeLocalClone, CloneHang, CloneFail)
	}
	return c.Faults.validate()
}

func (f Faults) validate() error {
	for m, d := range f.Delay {
		if !isCSIMethod(m) {
			return fmt.Errorf("delay: unknown CSI method %q", m)
		}
		if d < 0 {
			return fmt.Errorf("delay for %s is negative", m)
		}
	}
	for m, c := range f.Fail {
		if !isCSIMethod(m) {
			return fmt.Errorf("fail: unknown CSI method %q", m)
		}
		if c == codes.OK || c > codes.Unauthenticated {
			return fmt.Errorf("fail for %s: code %v is not an error code", m, c)
		}
	}
	if f.FailClones.Times < 0 || (f.FailClones.Times > 0 && (f.FailClones.Code == codes.OK || f.FailClones.Code > codes.Unauthenticated)) {
		return fmt.Errorf("fail-clones %s: want an error code and a positive count", f.FailClones.String())
	}
	if f.ExitAfter < 0 {
		return fmt.Errorf("exit-after %d is negative", f.ExitAfter)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.DriverName == "" {
		c.DriverName = DefaultDriverName
	}
	if c.NodeID == "" {
		c.NodeID = DefaultNodeID
	}
	if len(c.Pools) == 0 {
		c.Pools = []Pool{{Name: DefaultPoolName}}
	}
	pools := make([]Pool, len(c.Pools))
	for i, p := range c.Pools {
		if p.CapacityBytes == 0 {
			p.CapacityBytes = DefaultPoolCapacity
		}
		pools[i] = p
	}
	c.Pools = pools
	if c.DefaultPool == "" {
		c.DefaultPool = c.Pools[0].Name
	}
	if c.NodeLocalClone == "" {
		c.NodeLocalClone = CloneHang
	}
	return c
}

// CSIMethods lists the short names of every Identity, Controller and Node
// method, the keys faults use.
func CSIMethods() []string {
	var out []string
	for _, desc := range []grpc.ServiceDesc{csi.Identity_ServiceDesc, csi.Controller_ServiceDesc, csi.Node_ServiceDesc} {
		for _, m := range desc.Methods {
			out = append(out, m.MethodName)
		}
	}
	sort.Strings(out)
	return out
}

func isCSIMethod(m string) bool {
	for _, known := range CSIMethods() {
		if m == known {
			return true
		}
	}
	return false
}

// PoolsFlag is a repeatable flag.Value: NAME or NAME:node-local.
type PoolsFlag []Pool

func (p *PoolsFlag) String() string { return poolSummary(*p) }

// Set parses one --pool value.
func (p *PoolsFlag) Set(v string) error {
	name, kind, hasKind := strings.Cut(v, ":")
	pool := Pool{Name: name}
	if hasKind {
		if kind != "node-local" {
			return fmt.Errorf("pool %q: the only attribute is \"node-local\", got %q", v, kind)
		}
		pool.NodeLocal = true
	}
	if !poolNameRE.MatchString(name) {
		return fmt.Errorf("pool name %q: want letters, digits, '.', '_', '-'", name)
	}
	*p = append(*p, pool)
	return nil
}

// SizesFlag is a repeatable flag.Value: POOL=SIZE (SIZE like 10Gi or 1000000).
type SizesFlag map[string]int64

func (s SizesFlag) String() string { return fmt.Sprint(map[string]int64(s)) }

// Set parses one --capacity value.
func (s SizesFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("capacity %q: want POOL=SIZE", v)
	}
	q, err := resource.ParseQuantity(val)
	if err != nil {
		return fmt.Errorf("capacity %q: %v", v, err)
	}
	n, ok := q.AsInt64()
	if !ok || n <= 0 {
		return fmt.Errorf("capacity %q: want a positive whole number of bytes", v)
	}
	s[k] = n
	return nil
}

// DelaysFlag is a repeatable flag.Value: METHOD=DURATION.
type DelaysFlag map[string]time.Duration

func (d DelaysFlag) String() string { return fmt.Sprint(map[string]time.Duration(d)) }

// Set parses one --delay value.
func (d DelaysFlag) Set(v string) error {
	m, val, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("delay %q: want METHOD=DURATION", v)
	}
	if !isCSIMethod(m) {
		return fmt.Errorf("delay %q: unknown CSI method %q", v, m)
	}
	dur, err := time.ParseDuration(val)
	if err != nil || dur < 0 {
		return fmt.Errorf("delay %q: want a non-negative duration like 2s", v)
	}
	d[m] = dur
	return nil
}

// CodesFlag is a repeatable flag.Value: METHOD=CODE (a gRPC code name such as
// Unavailable or RESOURCE_EXHAUSTED, or its number).
type CodesFlag map[string]codes.Code

func (c CodesFlag) String() string { return fmt.Sprint(map[string]codes.Code(c)) }

// Set parses one --fail value.
func (c CodesFlag) Set(v string) error {
	m, val, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("fail %q: want METHOD=CODE", v)
	}
	if !isCSIMethod(m) {
		return fmt.Errorf("fail %q: unknown CSI method %q", v, m)
	}
	code, err := ParseCode(val)
	if err != nil {
		return fmt.Errorf("fail %q: %v", v, err)
	}
	c[m] = code
	return nil
}

// ParseCode reads a gRPC error code by name (any case, with or without
// underscores) or number. OK is refused: it is not a failure.
func ParseCode(s string) (codes.Code, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || n > int(codes.Unauthenticated) {
			return 0, fmt.Errorf("code %d: want 1..16", n)
		}
		return codes.Code(n), nil
	}
	want := strings.ToLower(strings.ReplaceAll(s, "_", ""))
	if want == "ok" {
		return 0, fmt.Errorf("code OK is not a failure")
	}
	for c := codes.Canceled; c <= codes.Unauthenticated; c++ {
		if strings.ToLower(c.String()) == want {
			return c, nil
		}
	}
	return 0, fmt.Errorf("unknown gRPC code %q (e.g. Unavailable, ResourceExhausted, Internal)", s)
}
