package main

import (
	"context"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"
)

// provisionerName is the StorageClass provisioner this node answers for.
const provisionerName = "dev.local/nodeexec"

// provisioner is a minimal external provisioner: a Pending PVC of its class
// gets a PersistentVolume (a directory under the state dir) pre-bound to it,
// which kube-controller-manager's PV binder then binds; a Released volume has
// its directory removed and is deleted, so data goes with the PVC.
type provisioner struct {
	client kubernetes.Interface
	pvcs   corelisters.PersistentVolumeClaimLister
	pvs    corelisters.PersistentVolumeLister
	class  string
	dir    string
}

func newProvisioner(client kubernetes.Interface, factory informers.SharedInformerFactory, class, stateDir string) *provisioner {
	return &provisioner{
		client: client,
		pvcs:   factory.Core().V1().PersistentVolumeClaims().Lister(),
		pvs:    factory.Core().V1().PersistentVolumes().Lister(),
		class:  class,
		dir:    filepath.Join(stateDir, "volumes"),
	}
}

// run reconciles every 200 ms from the informer caches: simple, and fast
// enough that binding is never the slow step of a cold start.
func (p *provisioner) run(ctx context.Context) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.reconcile(ctx)
		}
	}
}

func (p *provisioner) reconcile(ctx context.Context) {
	pvcs, _ := p.pvcs.List(labels.Everything())
	for _, pvc := range pvcs {
		if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != p.class ||
			pvc.Spec.VolumeName != "" || pvc.DeletionTimestamp != nil || pvc.Status.Phase != corev1.ClaimPending {
			continue
		}
		if _, err := p.pvs.Get("pvc-" + string(pvc.UID)); err == nil {
			continue
		}
		p.provision(ctx, pvc)
	}
	pvs, _ := p.pvs.List(labels.Everything())
	for _, pv := range pvs {
		if pv.Annotations["pv.kubernetes.io/provisioned-by"] != provisionerName || pv.DeletionTimestamp != nil {
			continue
		}
		if pv.Status.Phase == corev1.VolumeReleased || pv.Status.Phase == corev1.VolumeFailed {
			p.reclaim(ctx, pv)
		}
	}
}

func (p *provisioner) provision(ctx context.Context, pvc *corev1.PersistentVolumeClaim) {
	path := filepath.Join(p.dir, "pvc-"+string(pvc.UID))
	if err := os.MkdirAll(path, 0o777); err != nil {
		klog.Errorf("provision %s/%s: %v", pvc.Namespace, pvc.Name, err)
		return
	}
	_ = os.Chmod(path, 0o777)
	capacity := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "pvc-" + string(pvc.UID),
			Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": provisionerName},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: capacity},
			AccessModes:                   pvc.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              p.class,
			VolumeMode:                    pvc.Spec.VolumeMode,
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID,
			},
			// A local volume, not hostPath: the kubelet applies a pod's
			// fsGroup to local volumes (it never does to hostPath), as it
			// does to the block-storage volumes of users' clusters. Every
			// node of this cluster shares this machine's filesystem, so the
			// volume may be used on any of them.
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				Local: &corev1.LocalVolumeSource{Path: path},
			},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpExists},
				}}},
			}},
		},
	}
	if _, err := p.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		klog.Errorf("create PV for %s/%s: %v", pvc.Namespace, pvc.Name, err)
		return
	}
	klog.Infof("provisioned %s for %s/%s", pv.Name, pvc.Namespace, pvc.Name)
}

func (p *provisioner) reclaim(ctx context.Context, pv *corev1.PersistentVolume) {
	if pv.Spec.Local != nil && filepath.Dir(pv.Spec.Local.Path) == p.dir {
		if err := os.RemoveAll(pv.Spec.Local.Path); err != nil {
			klog.Errorf("remove %s: %v", pv.Spec.Local.Path, err)
			return
		}
	}
	err := p.client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		klog.Errorf("delete PV %s: %v", pv.Name, err)
		return
	}
	klog.Infof("reclaimed %s", pv.Name)
}
