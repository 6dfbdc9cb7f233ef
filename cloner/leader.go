package cloner

import (
	"context"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// LeaderConfig is the lease the verdict engine is elected with (the
// standard --leader-election-* flags).
type LeaderConfig struct {
	Namespace, LeaseName, Identity      string
	LeaseDuration, RenewDeadline, Retry time.Duration
}

// RunElected runs lead(ctx) whenever this replica holds the lease, until ctx
// is done. Unlike csi-lib-utils' helper, which exits the process when the
// lease is lost, it cancels lead and campaigns again: this process also
// carries the CSI data path, and losing a lease must never drop the other
// sidecars' connections to the driver.
func RunElected(ctx context.Context, kube kubernetes.Interface, cfg LeaderConfig, lead func(context.Context)) error {
	if cfg.Identity == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("leader election needs an identity: %w", err)
		}
		cfg.Identity = host
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, cfg.Namespace, cfg.LeaseName,
		kube.CoreV1(), kube.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: cfg.Identity})
	if err != nil {
		return fmt.Errorf("failed to build the leader election lock: %w", err)
	}
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.Retry,
		ReleaseOnCancel: true, Name: cfg.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				klog.InfoS("Became the verdict leader", "lease", cfg.Namespace+"/"+cfg.LeaseName, "identity", cfg.Identity)
				lead(ctx)
			},
			OnStoppedLeading: func() {
				klog.InfoS("No longer the verdict leader; relaying and evidence go on", "identity", cfg.Identity)
			},
		},
	})
	if err != nil {
		return fmt.Errorf("invalid leader election settings: %w", err)
	}
	for ctx.Err() == nil {
		elector.Run(ctx) // returns when the lease is lost or ctx is done
	}
	return nil
}
