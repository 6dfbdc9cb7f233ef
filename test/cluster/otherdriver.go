package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cozystack/csi-clone-sidecar/test/tools"
)

// StartOtherDriver starts a second test CSI driver named driver, with its
// own csi-provisioner and csi-snapshotter (straight on its socket: the
// sidecar relays only the first driver, as it would sit in only one CSI
// controller pod), its
// CSIDriver object and one StorageClass sc backed by one pool. A clone from
// a golden of the first driver onto sc is what CDI copies host-assisted for
// IncompatibleProvisioners; the emulator copies into this driver's volumes
// too.
func (c *Cluster) StartOtherDriver(ctx context.Context, driver string, sc StorageClass) error {
	bins, err := buildBinaries()
	if err != nil {
		return err
	}
	if driver == c.DriverName || c.otherDrivers[driver] != "" {
		return fmt.Errorf("driver %s is already running", driver)
	}
	state := filepath.Join(c.Dir, "driver-"+driver)
	sock := filepath.Join(c.Dir, "csi", driver+".sock")
	name := "csi-test-driver-" + driver
	if _, err := c.start(name, nil, filepath.Join(bins, "csi-test-driver"), "--endpoint=unix://"+sock,
		"--state-dir="+state, "--drivername="+driver, "--pool="+sc.pool()); err != nil {
		return err
	}
	c.onStop(func() error { return removeIfSocket(sock) })
	if err := c.waitSocket(name, sock, 30*time.Second); err != nil {
		return err
	}
	sidecars := map[string][]string{
		"csi-provisioner": {"--extra-create-metadata", "--immediate-topology=false"},
		// Snapshots of this driver's volumes: a golden VolumeSnapshot whose
		// content is another driver's than a pool's class.
		"csi-snapshotter": nil,
	}
	for name, args := range sidecars {
		bin, err := tools.Bin(name)
		if err != nil {
			return err
		}
		args = append([]string{"--csi-address=" + sock, "--kubeconfig=" + c.Kubeconfig, "--leader-election=false", "--v=4", "--timeout=30s"}, args...)
		if _, err := c.start(name+"-"+driver, nil, bin, args...); err != nil {
			return err
		}
	}
	c.mu.Lock()
	if c.otherDrivers == nil {
		c.otherDrivers = map[string]string{}
	}
	c.otherDrivers[driver] = state
	c.mu.Unlock()
	if _, err := c.Client.StorageV1().CSIDrivers().Create(ctx, newCSIDriver(driver), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("CSIDriver %s: %w", driver, err)
	}
	if _, err := c.Client.StorageV1().StorageClasses().Create(ctx, sc.object(driver), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("StorageClass %s: %w", sc.Name, err)
	}
	return nil
}

// volumeFileOf is the data file of a volume of the first driver or of one
// StartOtherDriver started.
func (c *Cluster) volumeFileOf(driver, volumeHandle string) (string, bool) {
	if driver == c.DriverName {
		return c.VolumeFile(volumeHandle), true
	}
	c.mu.Lock()
	state := c.otherDrivers[driver]
	c.mu.Unlock()
	if state == "" {
		return "", false
	}
	return filepath.Join(state, "volumes", volumeHandle+".img"), true
}
