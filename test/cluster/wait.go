package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

// WaitDataVolume polls a DataVolume until done returns true, an error, or
// timeout. A component that died on the way fails the wait at once. The
// error names the DataVolume's last phase and conditions.
func (c *Cluster) WaitDataVolume(ctx context.Context, ns, name string, timeout time.Duration, done func(*cdiv1.DataVolume) (bool, error)) (*cdiv1.DataVolume, error) {
	var last *cdiv1.DataVolume
	err := c.poll(ctx, timeout, func(ctx context.Context) (bool, error) {
		dv, err := c.DataVolume(ctx, ns, name)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		last = dv
		return done(dv)
	})
	if err != nil {
		return last, fmt.Errorf("DataVolume %s/%s: %w (last: %s)", ns, name, err, describeDV(last))
	}
	return last, nil
}

// WaitDataVolumePhase waits until a DataVolume reaches phase. Reaching Failed
// instead is an error unless Failed is what was asked for.
func (c *Cluster) WaitDataVolumePhase(ctx context.Context, ns, name string, phase cdiv1.DataVolumePhase, timeout time.Duration) (*cdiv1.DataVolume, error) {
	return c.WaitDataVolume(ctx, ns, name, timeout, func(dv *cdiv1.DataVolume) (bool, error) {
		if dv.Status.Phase == cdiv1.Failed && phase != cdiv1.Failed {
			return false, errors.New("DataVolume Failed")
		}
		return dv.Status.Phase == phase, nil
	})
}

func describeDV(dv *cdiv1.DataVolume) string {
	if dv == nil {
		return "not found"
	}
	s := fmt.Sprintf("phase=%q restarts=%d", dv.Status.Phase, dv.Status.RestartCount)
	for _, cond := range dv.Status.Conditions {
		s += fmt.Sprintf(" %s=%s(%s: %s)", cond.Type, cond.Status, cond.Reason, cond.Message)
	}
	return s
}

// WaitPVCBound waits until a PVC is Bound and returns it with its PV.
func (c *Cluster) WaitPVCBound(ctx context.Context, ns, name string, timeout time.Duration) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume, error) {
	var pvc *corev1.PersistentVolumeClaim
	var pv *corev1.PersistentVolume
	err := c.poll(ctx, timeout, func(ctx context.Context) (bool, error) {
		var err error
		pvc, err = c.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil || pvc.Status.Phase != corev1.ClaimBound {
			return false, err
		}
		pv, err = c.Client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		return err == nil, err
	})
	if err != nil {
		phase := "not found"
		if pvc != nil {
			phase = string(pvc.Status.Phase)
		}
		return pvc, pv, fmt.Errorf("PVC %s/%s not Bound (%s): %w", ns, name, phase, err)
	}
	return pvc, pv, nil
}

// poll runs cond every 200ms until it is true, fails, the timeout passes, or
// a component of the cluster exits.
func (c *Cluster) poll(ctx context.Context, timeout time.Duration, cond func(context.Context) (bool, error)) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Failed(); err != nil {
			return false, err
		}
		return cond(ctx)
	})
}

// Observations reads every CSI call the sidecar's tap has reported so far
// (its --observations-log, one JSON Observation per line).
func (c *Cluster) Observations() ([]sidecar.Observation, error) {
	if c.ObservationsLog == "" {
		return nil, errors.New("no sidecar in this cluster (Options.NoSidecar)")
	}
	f, err := os.Open(c.ObservationsLog)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []sidecar.Observation
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var o sidecar.Observation
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			// The sidecar may be mid-line: a torn last line is not an error.
			if !sc.Scan() {
				break
			}
			return nil, fmt.Errorf("%s: %w", c.ObservationsLog, err)
		}
		out = append(out, o)
	}
	return out, sc.Err()
}
