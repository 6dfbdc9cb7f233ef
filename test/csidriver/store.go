package csidriver

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// volume is the persisted record of one volume (volumes/<id>.json). Its data
// is volumes/<id>.img, a sparse file of CapacityBytes.
type volume struct {
	ID               string            `json:"id"`
	Pool             string            `json:"pool"`
	CapacityBytes    int64             `json:"capacityBytes"`
	Block            bool              `json:"block"`
	Parameters       map[string]string `json:"parameters,omitempty"`
	SourceVolumeID   string            `json:"sourceVolumeID,omitempty"`
	SourceSnapshotID string            `json:"sourceSnapshotID,omitempty"`
	CreatedAt        time.Time         `json:"createdAt"`
	// Published maps a node to whether it was published read-only there.
	Published map[string]bool `json:"published,omitempty"`
}

// snapshot is the persisted record of one snapshot (snapshots/<id>.json), a
// full copy of its source volume's data at snapshots/<id>.img.
type snapshot struct {
	ID             string            `json:"id"`
	SourceVolumeID string            `json:"sourceVolumeID"`
	Pool           string            `json:"pool"`
	SizeBytes      int64             `json:"sizeBytes"`
	Parameters     map[string]string `json:"parameters,omitempty"`
	CreatedAt      time.Time         `json:"createdAt"`
}

// IDs are the request names (like LINSTOR, whose volume handle is the PV
// name), so they double as file names: only characters safe in a path.
var idRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func validID(id string) bool { return idRE.MatchString(id) }

// reservation holds pool space for a volume or snapshot being written, so
// concurrent creates cannot overcommit a pool.
type reservation struct {
	pool  string
	bytes int64
}

// store is the driver's state: the maps are the truth while running, the
// JSON files make them survive a restart. mu guards all maps; data copies run
// outside it, with the target in pending and the source in busy.
type store struct {
	dir       string
	mu        sync.Mutex
	volumes   map[string]*volume
	snapshots map[string]*snapshot
	pending   map[string]reservation // "volume/<id>" or "snapshot/<id>" being created
	busy      map[string]int         // same keys: being read as a clone/snapshot source
}

func volumeKey(id string) string   { return "volume/" + id }
func snapshotKey(id string) string { return "snapshot/" + id }

func openStore(dir string) (*store, error) {
	s := &store{dir: dir, volumes: map[string]*volume{}, snapshots: map[string]*snapshot{},
		pending: map[string]reservation{}, busy: map[string]int{}}
	for _, sub := range []string{"volumes", "snapshots"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, fmt.Errorf("state directory: %w", err)
		}
	}
	if err := loadRecords(filepath.Join(dir, "volumes"), func(b []byte) (string, error) {
		var v volume
		err := json.Unmarshal(b, &v)
		s.volumes[v.ID] = &v
		return v.ID, err
	}); err != nil {
		return nil, err
	}
	if err := loadRecords(filepath.Join(dir, "snapshots"), func(b []byte) (string, error) {
		var sn snapshot
		err := json.Unmarshal(b, &sn)
		s.snapshots[sn.ID] = &sn
		return sn.ID, err
	}); err != nil {
		return nil, err
	}
	return s, nil
}

// loadRecords reads every <id>.json in dir. The JSON is written last when a
// volume is created and removed first when it is deleted, so a data file
// without one is the leftover of an interrupted call: it is removed.
func loadRecords(dir string, decode func([]byte) (string, error)) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read state: %w", err)
	}
	known := map[string]bool{}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return fmt.Errorf("read state: %w", err)
		}
		id, err := decode(b)
		if err != nil || id != name {
			return fmt.Errorf("state file %s is corrupt (id %q): %v", filepath.Join(dir, e.Name()), id, err)
		}
		known[id] = true
	}
	for _, e := range entries {
		id, isData := strings.CutSuffix(e.Name(), ".img")
		if (isData && !known[id]) || strings.HasSuffix(e.Name(), ".tmp") {
			klog.InfoS("removing leftover of an interrupted call", "file", filepath.Join(dir, e.Name()))
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	return nil
}

func (s *store) volumeData(id string) string   { return filepath.Join(s.dir, "volumes", id+".img") }
func (s *store) snapshotData(id string) string { return filepath.Join(s.dir, "snapshots", id+".img") }
func (s *store) volumeMeta(id string) string   { return filepath.Join(s.dir, "volumes", id+".json") }
func (s *store) snapshotMeta(id string) string { return filepath.Join(s.dir, "snapshots", id+".json") }

// writeJSON replaces path atomically: a crash leaves the old record or the
// new one, never half of one.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// used is the space taken in a pool, reservations included. Snapshots are
// full copies, so they count like volumes. Caller holds mu.
func (s *store) used(pool string) int64 {
	var n int64
	for _, v := range s.volumes {
		if v.Pool == pool {
			n += v.CapacityBytes
		}
	}
	for _, sn := range s.snapshots {
		if sn.Pool == pool {
			n += sn.SizeBytes
		}
	}
	for _, r := range s.pending {
		if r.pool == pool {
			n += r.bytes
		}
	}
	return n
}

// release drops a reservation and the source's busy mark. Caller holds mu.
func (s *store) release(key, sourceKey string) {
	delete(s.pending, key)
	if sourceKey == "" {
		return
	}
	if s.busy[sourceKey]--; s.busy[sourceKey] <= 0 {
		delete(s.busy, sourceKey)
	}
}

// inUse says why key cannot be changed right now, or "". Caller holds mu.
func (s *store) inUse(key string) string {
	if _, ok := s.pending[key]; ok {
		return "an operation on " + key + " is still in progress"
	}
	if s.busy[key] > 0 {
		return key + " is being copied by a clone or snapshot in progress"
	}
	return ""
}

func sortedIDs[T any](m map[string]T) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// removeFiles deletes a record and then its data; a missing file is fine.
func removeFiles(meta, data string) error {
	for _, p := range []string{meta, data} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}
