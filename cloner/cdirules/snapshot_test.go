package cdirules

import "testing"

// Every branch of computeStrategyForSourceSnapshot and of planner.go Plan
// for a snapshot source, in CDI's order (clone/planner.go, CDI v1.65.0).
// test/e2e's TestCDIRulesMatchCDIController compares them with
// cdi-controller over generated snapshot sources.
func TestPlanSnapshotFollowsComputeStrategyForSourceSnapshot(t *testing.T) {
	c := cluster("csi-clone") // the override does not count for a snapshot source
	good := Snapshot{Exists: true, HasStatus: true, SnapshotClass: "snaps", RestoreBytes: 10 * gi, HasRestoreSize: true,
		ContentBound: true, Driver: linstor, SourceVolumeMode: Block}
	claim := Claim{Class: "replicated", HasClass: true, VolumeMode: Block, Bytes: 20 * gi}
	with := func(f func(*Snapshot, *Claim)) (Snapshot, Claim) {
		s, cl := good, claim
		f(&s, &cl)
		return s, cl
	}
	cases := []struct {
		name string
		edit func(*Snapshot, *Claim)
		want string // CloneType/Fallback, "error", "waits"
	}{
		{"restored, expanded", func(*Snapshot, *Claim) {}, "snapshot/"},
		{"no class", func(_ *Snapshot, cl *Claim) { cl.HasClass = false }, "waits"},
		{"empty class", func(_ *Snapshot, cl *Claim) { cl.Class = "" }, "error"},
		{"missing class", func(_ *Snapshot, cl *Claim) { cl.Class = "nope" }, "error"},
		{"missing snapshot", func(s *Snapshot, _ *Claim) { s.Exists = false }, "waits"},
		{"no content", func(s *Snapshot, _ *Claim) { s.ContentBound = false }, "error"},
		{"another driver", func(s *Snapshot, _ *Claim) { s.Driver = "rbd.csi.ceph.com" }, "copy/" + FallbackNoProvisionerMatch},
		{"another driver before size", func(s *Snapshot, _ *Claim) { s.Driver, s.HasRestoreSize = "x", false }, "copy/" + FallbackNoProvisionerMatch},
		{"no restore size", func(s *Snapshot, _ *Claim) { s.HasRestoreSize = false }, "error"},
		{"larger, no expansion", func(_ *Snapshot, cl *Claim) { cl.Class = "fixed" }, "copy/" + FallbackNoVolumeExpansion},
		{"at restore size, no expansion", func(_ *Snapshot, cl *Claim) { cl.Class, cl.Bytes = "fixed", 10*gi }, "snapshot/"},
		{"sizeless, no expansion", func(_ *Snapshot, cl *Claim) { cl.Class, cl.Bytes = "fixed", 0 }, "snapshot/"},
		{"size before mode", func(s *Snapshot, cl *Claim) { cl.Class, s.SourceVolumeMode = "fixed", Filesystem },
			"copy/" + FallbackNoVolumeExpansion},
		{"other volume mode", func(s *Snapshot, _ *Claim) { s.SourceVolumeMode = Filesystem }, "copy/" + FallbackIncompatibleVolumeModes},
		{"unset source mode is Filesystem", func(s *Snapshot, cl *Claim) { s.SourceVolumeMode, cl.VolumeMode = "", Filesystem }, "snapshot/"},
		{"cloneType snapshot obeyed", func(s *Snapshot, cl *Claim) { s.SourceVolumeMode, cl.PerDisk.CloneType = "", ptr(StrategySnapshot) }, "snapshot/"},
		{"cloneType snapshot obeyed, larger, no expansion", func(_ *Snapshot, cl *Claim) { cl.Class, cl.PerDisk.CloneType = "fixed", ptr(StrategySnapshot) }, "error"},
		{"cloneType snapshot obeyed, at restore size, no expansion", func(_ *Snapshot, cl *Claim) {
			cl.Class, cl.Bytes, cl.PerDisk.CloneType = "fixed", 10*gi, ptr(StrategySnapshot)
		}, "snapshot/"},
		{"cloneType snapshot obeyed, restore size 0, no expansion", func(s *Snapshot, cl *Claim) {
			s.RestoreBytes, cl.Class, cl.PerDisk.CloneType = 0, "fixed", ptr(StrategySnapshot)
		}, "snapshot/"},
		{"cloneType snapshot, another driver", func(s *Snapshot, cl *Claim) { s.Driver, cl.PerDisk.CloneType = "x", ptr(StrategySnapshot) }, "stuck: " + StuckDriver},
		{"cloneType snapshot, another mode", func(_ *Snapshot, cl *Claim) { cl.VolumeMode, cl.PerDisk.CloneType = Filesystem, ptr(StrategySnapshot) },
			"stuck: " + StuckVolumeMode},
		{"cloneType snapshot, mode change allowed", func(s *Snapshot, cl *Claim) {
			s.AllowVolumeModeChange, cl.VolumeMode, cl.PerDisk.CloneType = true, Filesystem, ptr(StrategySnapshot)
		}, "snapshot/"},
		{"cloneType snapshot, unrecorded mode", func(s *Snapshot, cl *Claim) {
			s.SourceVolumeMode, cl.VolumeMode, cl.PerDisk.CloneType = "", Block, ptr(StrategySnapshot)
		}, "snapshot/"},
		{"cloneType on a missing class", func(_ *Snapshot, cl *Claim) { cl.Class, cl.PerDisk.CloneType = "nope", ptr(StrategyCopy) }, "error"},
		{"cloneType copy obeyed", func(_ *Snapshot, cl *Claim) { cl.PerDisk.CloneType = ptr(StrategyCopy) }, "copy/"},
		{"cloneType csi-clone unknown", func(_ *Snapshot, cl *Claim) { cl.PerDisk.CloneType = ptr(StrategyCSIClone) }, "error"},
		{"cloneType empty unknown", func(_ *Snapshot, cl *Claim) { cl.PerDisk.CloneType = ptr("") }, "error"},
	}
	for _, tc := range cases {
		s, cl := with(tc.edit)
		o := c.PlanSnapshot(s, cl)
		got := o.CloneType + "/" + o.Fallback
		switch {
		case o.Error != "":
			got = "error"
		case o.Waits != "":
			got = "waits"
		case o.Stuck != "":
			got = "stuck: " + o.Stuck
		}
		if got != tc.want {
			t.Errorf("%s: %s (%+v), want %s", tc.name, got, o, tc.want)
		}
	}
}

// snapshot-clone-controller.go validateSnapshotClone: the snapshot must be
// usable and a sized disk at least its restore size (raised to the class's
// minimum supported size first); a restore size of 0 needs a sized disk.
func TestValidateSnapshotCloneFollowsTheDataVolumeController(t *testing.T) {
	c := cluster("")
	c.Profiles["replicated"].Annotations = map[string]string{"cdi.kubevirt.io/minimumSupportedPvcSize": "12Gi"}
	good := Snapshot{Exists: true, HasStatus: true, SnapshotClass: "snaps", RestoreBytes: 10 * gi, HasRestoreSize: true}
	dv := DataVolume{Kind: KindStorage, Class: ptr("fixed"), Bytes: 10 * gi}
	cases := []struct {
		name string
		edit func(*Snapshot, *DataVolume)
		ok   bool
	}{
		{"at restore size", func(*Snapshot, *DataVolume) {}, true},
		{"below restore size", func(_ *Snapshot, d *DataVolume) { d.Bytes = 9 * gi }, false},
		{"below, raised to the minimum", func(_ *Snapshot, d *DataVolume) { d.Bytes, d.Class = 9*gi, ptr("replicated") }, true},
		{"spec.pvc is not raised", func(_ *Snapshot, d *DataVolume) { d.Bytes, d.Class, d.Kind = 9*gi, ptr("replicated"), KindPVC }, false},
		{"sizeless", func(_ *Snapshot, d *DataVolume) { d.Bytes = 0 }, true},
		{"restore size 0, sized", func(s *Snapshot, _ *DataVolume) { s.RestoreBytes = 0 }, true},
		{"restore size 0, sizeless", func(s *Snapshot, d *DataVolume) { s.RestoreBytes, d.Bytes = 0, 0 }, false},
		{"no status", func(s *Snapshot, _ *DataVolume) { s.HasStatus = false }, false},
		{"error", func(s *Snapshot, _ *DataVolume) { s.Error = "boom" }, false},
		{"no snapshot class", func(s *Snapshot, _ *DataVolume) { s.SnapshotClass = "" }, false},
		{"no restore size", func(s *Snapshot, _ *DataVolume) { s.HasRestoreSize = false }, false},
		{"negative restore size", func(s *Snapshot, _ *DataVolume) { s.RestoreBytes = -1 }, false},
	}
	for _, tc := range cases {
		s, d := good, dv
		tc.edit(&s, &d)
		if err := ValidateSnapshotClone(d, s, Defaults{}, c.Env); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// detectCloneSize: a sizeless spec.storage claim is the restore size, as is.
func TestSnapshotCloneSizeIsTheRestoreSize(t *testing.T) {
	snap := Snapshot{RestoreBytes: 7 * gi}
	if got := SnapshotCloneSize(Claim{VolumeMode: Filesystem}, snap); got != 7*gi {
		t.Errorf("sizeless: %d, want the restore size %d", got, 7*gi)
	}
	if got := SnapshotCloneSize(Claim{Bytes: 9 * gi}, snap); got != 9*gi {
		t.Errorf("sized: %d, want its own size", got)
	}
}

// syncSnapshotClone's order for a DataVolume of a snapshot source: the
// claim is rendered and the populator path chosen (syncCommon) before the
// snapshot is looked at; a missing snapshot waits before any validation;
// validateSnapshotClone before detectCloneSize; the legacy path copies
// without a plan; a sizeless disk is planned at the restore size.
func TestCloneFromSnapshotFollowsSyncSnapshotClone(t *testing.T) {
	c := cluster("")
	good := Snapshot{Exists: true, HasStatus: true, SnapshotClass: "snaps", RestoreBytes: 10 * gi, HasRestoreSize: true,
		ContentBound: true, Driver: linstor, SourceVolumeMode: Block}
	dv := DataVolume{Kind: KindStorage, Class: ptr("fixed"), VolumeMode: Block, AccessModes: []string{"ReadWriteOnce"}}
	cases := []struct {
		name string
		edit func(*Snapshot, *DataVolume)
		want string
	}{
		{"sizeless restores at the restore size, no expansion needed", func(*Snapshot, *DataVolume) {}, "snapshot/"},
		{"sized above the restore size, no expansion", func(_ *Snapshot, d *DataVolume) { d.Bytes = 11 * gi }, "copy/" + FallbackNoVolumeExpansion},
		{"a Filesystem claim carries the overhead", func(s *Snapshot, d *DataVolume) {
			s.SourceVolumeMode, d.VolumeMode, d.Bytes = Filesystem, Filesystem, 10*gi
		}, "copy/" + FallbackNoVolumeExpansion},
		{"below the restore size", func(_ *Snapshot, d *DataVolume) { d.Bytes = 2 * gi }, "validation"},
		{"missing before unusable", func(s *Snapshot, _ *DataVolume) { *s = Snapshot{} }, "waits"},
		{"unusable", func(s *Snapshot, _ *DataVolume) { s.SnapshotClass = "" }, "validation"},
		{"render before the snapshot", func(s *Snapshot, d *DataVolume) { *s, d.Class, d.AccessModes = Snapshot{}, ptr("gone"), nil }, "render"},
		{"usePopulator parse before the snapshot", func(s *Snapshot, d *DataVolume) { *s, d.PerDisk.UsePopulator = Snapshot{}, ptr("yes") }, "error"},
		{"legacy path after validation", func(_ *Snapshot, d *DataVolume) { d.PerDisk.UsePopulator = ptr("false") }, "copy/" + FallbackNoPopulator},
		{"legacy path still validates", func(_ *Snapshot, d *DataVolume) { d.Bytes, d.PerDisk.UsePopulator = 2*gi, ptr("false") }, "validation"},
		{"another driver's content", func(s *Snapshot, _ *DataVolume) { s.Driver = "rbd.csi.ceph.com" }, "copy/" + FallbackNoProvisionerMatch},
		{"unqualified source: the VolumeCloneSource fails", func(_ *Snapshot, d *DataVolume) { d.UnqualifiedSource = true }, "error"},
		{"unqualified source: validation first", func(_ *Snapshot, d *DataVolume) { d.Bytes, d.UnqualifiedSource = 2*gi, true }, "validation"},
		{"unqualified source: missing first", func(s *Snapshot, d *DataVolume) { *s, d.UnqualifiedSource = Snapshot{}, true }, "waits"},
		{"unqualified source on the legacy path", func(_ *Snapshot, d *DataVolume) { d.UnqualifiedSource, d.PerDisk.UsePopulator = true, ptr("false") },
			"copy/" + FallbackNoPopulator},
	}
	for _, tc := range cases {
		s, d := good, dv
		tc.edit(&s, &d)
		o, _, rendered := c.CloneFromSnapshotWithClaim(d, s)
		got := o.CloneType + "/" + o.Fallback
		switch {
		case o.Render:
			got = "render"
		case o.Validation != "":
			got = "validation"
		case o.Waits != "":
			got = "waits"
		case o.Error != "":
			got = "error"
		}
		if got != tc.want {
			t.Errorf("%s: %s (%+v), want %s", tc.name, got, o, tc.want)
		}
		if rendered == o.Render {
			t.Errorf("%s: rendered=%v with Render=%v", tc.name, rendered, o.Render)
		}
	}
}

// A claim source copied from a DataSource without a namespace: validated
// and sized in the DataVolume's namespace, then the populator path fails
// creating its VolumeCloneSource (ErrEmptySourceNamespace); the legacy path
// does not make one.
func TestUnqualifiedSourceFailsOnThePopulatorPath(t *testing.T) {
	c := cluster("csi-clone")
	src := Source{Class: "replicated", VolumeMode: Block, RequestBytes: 10 * gi, CapacityBytes: 10 * gi}
	dv := DataVolume{Kind: KindStorage, Class: ptr("replicated"), VolumeMode: Block, AccessModes: []string{"ReadWriteOnce"}, UnqualifiedSource: true}
	if o := c.Clone(dv, src); o.Error != ErrEmptySourceNamespace {
		t.Errorf("populator path: %+v, want error %q", o, ErrEmptySourceNamespace)
	}
	small := dv
	small.Bytes, small.Kind = 2*gi, KindPVC
	if o := c.Clone(small, src); o.Validation == "" {
		t.Errorf("too small: %+v, want CloneValidationFailed first", o)
	}
	legacy := dv
	legacy.PerDisk.UsePopulator = ptr("false")
	if o := c.Clone(legacy, src); o.Fallback != FallbackNoPopulator || o.Error != "" {
		t.Errorf("legacy path: %+v, want copy/NoPopulator", o)
	}
	dv.UnqualifiedSource = false
	if o := c.Clone(dv, src); o.CloneType != StrategyCSIClone || o.Error != "" {
		t.Errorf("qualified: %+v, want csi-clone", o)
	}
}
