package cluster

import (
	"errors"
	"slices"
)

// Switching the kubernetes-csi sidecars between the relay and the driver
// within one stack, so that the same clones can be timed both ways in one
// run (test/benche2e).

// BypassSidecar stops csi-clone-sidecar and the kubernetes-csi sidecars and
// starts the latter again pointed straight at the driver's socket, as a
// stack without the sidecar (Options.NoSidecar) has them. UseSidecar undoes
// it. Standby replicas are left alone.
func (c *Cluster) BypassSidecar() error {
	if c.opts.NoSidecar {
		return errors.New("bypass csi-clone-sidecar: none runs in this cluster (Options.NoSidecar)")
	}
	if err := c.StopSidecar(); err != nil {
		return err
	}
	c.SidecarSocket = c.DriverSocket
	return c.startDialers()
}

// UseSidecar stops the kubernetes-csi sidecars and starts csi-clone-sidecar
// (a new process, same socket, metrics endpoint and RBAC) and then them,
// dialling it again. Call it after BypassSidecar.
func (c *Cluster) UseSidecar() error {
	var errs []error
	for _, name := range slices.Clone(csiSidecarNames) {
		errs = append(errs, c.stopComponent(name))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return c.StartSidecar(c.rbacEdit)
}
