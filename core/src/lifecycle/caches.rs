//! The provider's shared watches: one [`Informer`] per kind in its
//! namespace (claims, Sandboxes, pods), which every wait of the lifecycle
//! and every exec's pod-liveness check subscribes to, and which answers the
//! reads of a reconnect. A provider serves exactly one namespace (see
//! `Lifecycle::own_id`), so there is one watch per kind per provider.

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus};
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

use super::names::ACTOR_LABEL;
use super::resources::{ClaimObject, Kind, SandboxObject};
use crate::client::informer::{ApiSource, Informer};

/// The label agent-sandbox puts on every pod it creates or adopts: the pod
/// watch selects on it (as the controller's own cache can), so pods that are
/// no sandbox's are neither sent nor kept. A label that is never removed
/// while the pod lives: a removed one would look like a deletion.
pub(crate) const POD_LABEL: &str = "agents.x-k8s.io/sandbox-name-hash";
/// The label of a warm pool's unclaimed members (Sandbox and pod); the
/// adoption removes it from the Sandbox in the same patch that makes the
/// claim its controller (and from the pod on the controller's next pass).
const POOL_MEMBER_LABEL: &str = "agents.x-k8s.io/warm-pool-sandbox";

/// One informer per kind, started on first use.
pub(crate) struct Caches {
    /// Claims this provider made (selected by our actor label).
    pub claims: Informer<ClaimObject>,
    /// Sandboxes: in direct mode those we made (our label); in warm-pool
    /// mode every claimed one of the namespace (an adopted pool member does
    /// not carry our labels), not the pools' unclaimed members: a claim's
    /// member enters the watch with its adoption.
    pub sandboxes: Informer<SandboxObject>,
    /// Sandbox pods; in direct mode not those of pool members (another
    /// worker's pool in the namespace). In warm-pool mode members' pods are
    /// kept: the controller removes their pool label after the adoption, and
    /// a connect must not wait for that.
    pub pods: Informer<Pod>,
}

impl Caches {
    /// The informers of `namespace`; their watches end for good when `stop`
    /// is cancelled (the provider is dropped).
    pub(crate) fn new(client: &Client, namespace: &str, warm: bool, stop: &CancellationToken) -> Self {
        let ours = watcher::Config::default().labels(ACTOR_LABEL);
        let claims = ApiSource::new(
            Kind::SandboxClaim.api(client, namespace),
            namespace,
            ours.clone(),
            Kind::SandboxClaim.resource(),
            slim_object,
        );
        let not_members = format!("!{POOL_MEMBER_LABEL}");
        let sandboxes = ApiSource::new(
            Kind::Sandbox.api(client, namespace),
            namespace,
            if warm { watcher::Config::default().labels(&not_members) } else { ours },
            Kind::Sandbox.resource(),
            slim_object,
        );
        let pod_selector = if warm { POD_LABEL.to_owned() } else { format!("{POD_LABEL},{not_members}") };
        let pods = ApiSource::new(
            Api::namespaced(client.clone(), namespace),
            namespace,
            watcher::Config::default().labels(&pod_selector),
            "pods",
            slim_pod,
        );
        Caches {
            claims: Informer::new(claims, stop.child_token()),
            sandboxes: Informer::new(sandboxes, stop.child_token()),
            pods: Informer::new(pods, stop.child_token()),
        }
    }
}

impl Caches {
    /// Starts the watches a call will wait on (claims only in warm-pool
    /// mode), so their lists run in parallel.
    pub(crate) fn start(&self, warm: bool) {
        if warm {
            self.claims.start();
        }
        self.sandboxes.start();
        self.pods.start();
    }
}

/// Claims and Sandboxes are parsed into partial views already (see
/// `resources`); their metadata's managedFields is most of what is left.
fn slim_object<P: Clone, U: Clone>(o: &mut kube::core::Object<P, U>) {
    o.metadata.managed_fields = None;
}

/// A pod as the lifecycle and exec read it: identity, owner, node, container
/// names and the status fields readiness decides on. The rest (most of the
/// spec, the environment among it) is neither needed nor kept.
fn slim_pod(pod: &mut Pod) {
    let meta = &mut pod.metadata;
    meta.managed_fields = None;
    meta.annotations = None;
    if let Some(spec) = pod.spec.take() {
        let containers = spec.containers.into_iter().map(|c| Container { name: c.name, ..Default::default() });
        pod.spec = Some(PodSpec { node_name: spec.node_name, containers: containers.collect(), ..Default::default() });
    }
    if let Some(status) = pod.status.take() {
        pod.status = Some(PodStatus {
            phase: status.phase,
            reason: status.reason,
            message: status.message,
            conditions: status.conditions,
            container_statuses: status.container_statuses,
            init_container_statuses: status.init_container_statuses,
            ..Default::default()
        });
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ContainerStatus, EnvVar};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta, OwnerReference};

    use super::*;
    use crate::lifecycle::readiness;

    #[test]
    fn a_slim_pod_keeps_what_readiness_and_exec_read() {
        let mut pod = Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                uid: Some("u".into()),
                managed_fields: Some(vec![ManagedFieldsEntry::default()]),
                owner_references: Some(vec![OwnerReference { uid: "o".into(), ..Default::default() }]),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("n".into()),
                containers: vec![Container {
                    name: "c".into(),
                    image: Some("i".into()),
                    env: Some(vec![EnvVar { name: "SECRET".into(), value: Some("v".into()), ..Default::default() }]),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                container_statuses: Some(vec![ContainerStatus { name: "c".into(), ..Default::default() }]),
                pod_ip: Some("10.0.0.1".into()),
                ..Default::default()
            }),
        };
        let before = readiness::pod_failure(&pod);
        slim_pod(&mut pod);
        assert_eq!(readiness::pod_failure(&pod), before);
        assert_eq!(readiness::scheduled_node(&pod), Some("n"));
        assert!(pod.metadata.managed_fields.is_none());
        assert_eq!(pod.metadata.owner_references.as_ref().unwrap()[0].uid, "o");
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.containers[0].name, "c");
        assert!(spec.containers[0].env.is_none(), "the environment is not kept");
        let status = pod.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert!(status.pod_ip.is_none());
    }
}
