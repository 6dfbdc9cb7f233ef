package verdict

import (
	"testing"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// TestVerdictOfCloneTypeCoversCDIsCloneTypes: the mechanism CDI's
// cloneType annotation names, over the whole set CDI writes and what it
// does not write.
func TestVerdictOfCloneTypeCoversCDIsCloneTypes(t *testing.T) {
	for cloneType, want := range map[string]string{
		fleet.CdiCloneTypeCSIClone:  record.VerdictCSIClone,
		fleet.CdiCloneTypeSnapshot:  record.VerdictSnapshotClone,
		fleet.CdiCloneTypeHostAssis: record.VerdictHostAssisted,
		"":                          record.VerdictUnknown,
		"csi-clone ":                record.VerdictUnknown,
		"network":                   record.VerdictUnknown,
	} {
		if got := verdictOfCloneType(cloneType); got != want {
			t.Errorf("cloneType %q: verdict %q, want %q", cloneType, got, want)
		}
	}
}

// TestPathOfVerdictCoversEveryVerdict: the clone path each verdict word
// shows, over every verdict; pending, unknown and http-import show none.
func TestPathOfVerdictCoversEveryVerdict(t *testing.T) {
	type shown struct {
		path    string
		decided bool
	}
	for verdict, want := range map[string]shown{
		record.VerdictPending:       {"", false},
		record.VerdictCSIClone:      {predict.PathCSIClone, true},
		record.VerdictSnapshotClone: {predict.PathSnapshotClone, true},
		record.VerdictHostAssisted:  {predict.PathHostAssisted, true},
		record.VerdictHTTPImport:    {"", false},
		record.VerdictStuck:         {predict.PathBlocked, true},
		record.VerdictFailed:        {predict.PathBlocked, true},
		record.VerdictUnknown:       {"", false},
	} {
		if path, decided := pathOfVerdict(verdict); path != want.path || decided != want.decided {
			t.Errorf("verdict %q: path %q decided %v, want %q %v", verdict, path, decided, want.path, want.decided)
		}
	}
}
