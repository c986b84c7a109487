//! Checks made by `create` in warm-pool mode before claiming: the pool
//! exists, and with `suspend: "pod"` its template keeps `cwd` on a
//! persistent volume (otherwise every suspend would silently lose the files).
//! The template is also read for how well it isolates what a model runs
//! (seccomp, RuntimeClass, a NetworkPolicy): gaps there are warnings, not
//! errors, since the template is the cluster operator's choice.
//! [`PoolCheck`] remembers a passed check for a while, so a burst of creates
//! costs one check instead of two extra round trips each.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::ListParams;
use kube::core::{Selector, SelectorExt};
use kube::{Api, Client};
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::resources::{Kind, TemplateObject, TemplateSpec, WarmPoolObject};
use crate::client::{api_error, Action};
use crate::config::{validate, SuspendPolicy, WarmPoolMode};
use crate::error::{Error, ErrorCode, Result};

/// What the check needs from the provider config.
pub(crate) struct Checked<'a> {
    /// The warm-pool options.
    pub pool: &'a WarmPoolMode,
    /// Working directory.
    pub cwd: &'a str,
    /// `container` option.
    pub container: Option<&'a str>,
    /// `suspend` option.
    pub suspend: SuspendPolicy,
}

/// How long a passed check is trusted: long enough to serve a burst of
/// creates, short enough that a pool or template changed under a long-lived
/// provider is noticed again.
const RECHECK_AFTER: Duration = Duration::from_secs(60);

/// The warm-pool check of one provider, with its last success remembered
/// (failures are not: the next create checks again).
#[derive(Default)]
pub(crate) struct PoolCheck {
    /// Held across the check, so concurrent creates wait for one check
    /// instead of each making their own.
    state: Mutex<CheckState>,
}

#[derive(Default)]
struct CheckState {
    /// When the check last passed.
    passed_at: Option<Instant>,
    /// The warnings given so far: each reaches `onEvent` once per provider,
    /// not with every create.
    warned: HashSet<String>,
}

impl PoolCheck {
    /// Runs [`check_warm_pool`] unless it passed less than [`RECHECK_AFTER`]
    /// ago; returns the warnings this provider has not given yet.
    pub(crate) async fn ensure(&self, client: &Client, namespace: &str, c: &Checked<'_>) -> Result<Vec<String>> {
        let mut state = self.state.lock().await;
        if state.passed_at.is_some_and(|t| t.elapsed() < RECHECK_AFTER) {
            return Ok(Vec::new());
        }
        let warnings = check_warm_pool(client, namespace, c).await?;
        state.passed_at = Some(Instant::now());
        Ok(warnings.into_iter().filter(|w| state.warned.insert(w.clone())).collect())
    }
}

/// Verifies the pool (and, for `suspend: "pod"`, its template); returns the
/// template's isolation warnings.
async fn check_warm_pool(client: &Client, namespace: &str, c: &Checked<'_>) -> Result<Vec<String>> {
    let pool_name = c.pool.pool.as_str();
    let pool: WarmPoolObject = get(client, namespace, Kind::SandboxWarmPool, pool_name).await.map_err(|e| {
        if e.code == ErrorCode::NotFound {
            Error::config(format!(
                "option `warmPool`: SandboxWarmPool {pool_name:?} does not exist in namespace {namespace:?}"
            ))
        } else {
            e
        }
    })?;
    let template_name = pool.spec.sandbox_template_ref.name;
    let template: TemplateObject =
        get(client, namespace, Kind::SandboxTemplate, &template_name).await.map_err(|e| {
            if e.code == ErrorCode::NotFound {
                Error::config(format!(
                "SandboxTemplate {template_name:?} of warm pool {pool_name:?} does not exist in namespace {namespace:?}"
            ))
            } else {
                e
            }
        })?;
    if c.suspend == SuspendPolicy::Pod {
        let claim_volumes: Vec<String> = c
            .pool
            .volume_claim_templates
            .iter()
            .filter_map(|v| v.pointer("/metadata/name")?.as_str().map(str::to_string))
            .collect();
        persistent_cwd(&template.spec, &claim_volumes, c.container, c.cwd).map_err(|why| {
            Error::config(format!(
                "option `suspend: \"pod\"` deletes the pod on suspend, so only a persistent volume at cwd {cwd:?} survives, \
                 but warm pool {pool_name:?} (SandboxTemplate {template_name:?}) {why}. Fix the template: add a \
                 `volumeClaimTemplates` entry (e.g. `metadata.name: workspace`) and a matching `volumeMounts` entry at {cwd:?} \
                 in the container; or set `suspend: \"none\"` to keep pods running",
                cwd = c.cwd
            ))
        })?;
    }
    let policies = if template.spec.network_policy_management.as_deref() == Some("Unmanaged") {
        Some(network_policies(client, namespace).await)
    } else {
        None
    };
    let mut labels = template.spec.pod_template.metadata.labels.clone();
    labels.extend(c.pool.pod_labels.clone());
    let findings = isolation_gaps(&template.spec.pod_template.spec, &labels, policies);
    let what = format!("SandboxTemplate {template_name:?} (warm pool {pool_name:?} in namespace {namespace:?})");
    Ok(findings.into_iter().map(|f| format!("{what} {f}")).collect())
}

/// The namespace's NetworkPolicies, or why they cannot be read. Only the
/// isolation warning depends on them, so nothing here fails the create.
async fn network_policies(client: &Client, namespace: &str) -> std::result::Result<Vec<NetworkPolicy>, String> {
    let api: Api<NetworkPolicy> = Api::namespaced(client.clone(), namespace);
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(s)) if s.code == 403 => {
            Err("`list networkpolicies.networking.k8s.io` is not granted".to_string())
        }
        Err(e) => {
            let e = api_error(
                e,
                Action { verb: "list", resource: "networkpolicies.networking.k8s.io", name: None, namespace },
            );
            Err(e.message)
        }
    }
}

/// What leaves a template's pods less isolated than the shipped template
/// (examples/manifests/): containers without a seccomp profile, no
/// RuntimeClass, and, when the template leaves the NetworkPolicy to the
/// namespace (`policies` is `Some`), no policy there that restricts both
/// ingress and egress of pods with `labels` (or `Err`: the policies could
/// not be read). Each finding completes a sentence that starts with the
/// template's name.
pub(crate) fn isolation_gaps(
    pod: &PodSpec,
    labels: &BTreeMap<String, String>,
    policies: Option<std::result::Result<Vec<NetworkPolicy>, String>>,
) -> Vec<String> {
    let mut gaps = Vec::new();
    let pod_seccomp = pod.security_context.as_ref().and_then(|s| s.seccomp_profile.as_ref()).map(|p| p.type_.as_str());
    let unconfined: Vec<&str> = pod
        .init_containers
        .iter()
        .flatten()
        .chain(&pod.containers)
        .filter(|c| {
            let own = c.security_context.as_ref().and_then(|s| s.seccomp_profile.as_ref()).map(|p| p.type_.as_str());
            matches!(own.or(pod_seccomp), None | Some("Unconfined"))
        })
        .map(|c: &Container| c.name.as_str())
        .collect();
    if !unconfined.is_empty() {
        gaps.push(format!(
            "runs container(s) {} without a seccomp profile (Unconfined unless the kubelet sets seccompDefault): \
             set `securityContext.seccompProfile.type: RuntimeDefault` in its pod spec",
            unconfined.join(", ")
        ));
    }
    if pod.runtime_class_name.is_none() {
        gaps.push(
            "names no `runtimeClassName`: model-written code runs in a plain container on the node's kernel; \
             use gVisor or Kata where the nodes have it (examples/manifests/README.md, \"Stronger isolation\")"
                .to_string(),
        );
    }
    match policies {
        Some(Ok(list)) if !list.iter().any(|p| restricts_both_ways(p, labels)) => gaps.push(
            "has `networkPolicyManagement: Unmanaged`, and no NetworkPolicy in the namespace restricts both \
             ingress and egress of its pods: they can reach and be reached by anything on the network \
             (apply examples/manifests/network-policy.yaml)"
                .to_string(),
        ),
        Some(Err(why)) => gaps.push(format!(
            "has `networkPolicyManagement: Unmanaged`, and whether a NetworkPolicy of the namespace covers its \
             pods could not be checked ({why}); without one they can reach and be reached by anything on the network"
        )),
        _ => {}
    }
    gaps
}

/// The policy selects pods with `labels` and governs both directions (an
/// unset `policyTypes` means Ingress, plus Egress when it has egress rules).
fn restricts_both_ways(policy: &NetworkPolicy, labels: &BTreeMap<String, String>) -> bool {
    let Some(spec) = &policy.spec else { return false };
    let types: Vec<&str> = match &spec.policy_types {
        Some(t) => t.iter().map(String::as_str).collect(),
        None if spec.egress.as_ref().is_some_and(|e| !e.is_empty()) => vec!["Ingress", "Egress"],
        None => vec!["Ingress"],
    };
    // An absent podSelector selects every pod of the namespace, as `{}` does.
    let selects = Selector::try_from(spec.pod_selector.clone().unwrap_or_default()).is_ok_and(|s| s.matches(labels));
    selects && types.contains(&"Ingress") && types.contains(&"Egress")
}

async fn get<T>(
    client: &Client,
    namespace: &str,
    kind: Kind,
    name: &str,
) -> Result<kube::core::Object<T, serde_json::Value>>
where
    T: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    kind.api::<T, serde_json::Value>(client, namespace)
        .get(name)
        .await
        .map_err(|e| api_error(e, Action { verb: "get", resource: kind.resource(), name: Some(name), namespace }))
}

/// `Ok` when the container (option or first) mounts a persistent volume at
/// or above `cwd`: one of the template's or the claim's volume claim
/// templates, or a PVC volume. `Err` says what is missing.
pub(crate) fn persistent_cwd(
    spec: &TemplateSpec,
    claim_volumes: &[String],
    container: Option<&str>,
    cwd: &str,
) -> std::result::Result<(), String> {
    let pod = &spec.pod_template.spec;
    let c = match container {
        Some(name) => pod.containers.iter().find(|c| c.name == name).ok_or_else(|| {
            let names: Vec<&str> = pod.containers.iter().map(|c| c.name.as_str()).collect();
            format!("has no container {name:?} (containers: {})", names.join(", "))
        })?,
        None => pod.containers.first().ok_or("has no containers")?,
    };
    let mount = c
        .volume_mounts
        .iter()
        .flatten()
        .filter(|m| validate::path_within(cwd, m.mount_path.trim_end_matches('/')))
        .max_by_key(|m| m.mount_path.len())
        .ok_or_else(|| format!("mounts no volume at {cwd:?} in container {:?}", c.name))?;
    let is_vct = spec.volume_claim_templates.iter().any(|v| v.metadata.name == mount.name)
        || claim_volumes.contains(&mount.name);
    let is_pvc = pod.volumes.iter().flatten().any(|v| v.name == mount.name && v.persistent_volume_claim.is_some());
    if is_vct || is_pvc {
        Ok(())
    } else {
        Err(format!("mounts volume {:?} at {:?}, which is not a persistent volume claim", mount.name, mount.mount_path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(mounts: serde_json::Value, vcts: serde_json::Value, volumes: serde_json::Value) -> TemplateSpec {
        serde_json::from_value(json!({
            "podTemplate": { "spec": {
                "containers": [{ "name": "sandbox", "image": "i", "volumeMounts": mounts }],
                "volumes": volumes,
            } },
            "volumeClaimTemplates": vcts,
        }))
        .unwrap()
    }

    #[test]
    fn finds_persistent_cwd() {
        let vct = json!([{ "metadata": { "name": "workspace" }, "spec": {} }]);
        let mount = json!([{ "name": "workspace", "mountPath": "/workspace" }]);
        assert!(persistent_cwd(&template(mount.clone(), vct.clone(), json!([])), &[], None, "/workspace").is_ok());
        assert!(persistent_cwd(&template(mount.clone(), vct.clone(), json!([])), &[], None, "/workspace/sub").is_ok());
        let e = persistent_cwd(&template(mount.clone(), vct.clone(), json!([])), &[], None, "/home").unwrap_err();
        assert!(e.contains("mounts no volume"), "{e}");
        let e = persistent_cwd(&template(mount.clone(), vct, json!([])), &[], Some("other"), "/workspace").unwrap_err();
        assert!(e.contains("no container"), "{e}");
        // An emptyDir is not persistent, unless a claim VCT of the same name replaces it.
        let empty = json!([{ "name": "workspace", "emptyDir": {} }]);
        let e =
            persistent_cwd(&template(mount.clone(), json!([]), empty.clone()), &[], None, "/workspace").unwrap_err();
        assert!(e.contains("not a persistent"), "{e}");
        assert!(persistent_cwd(&template(mount.clone(), json!([]), empty), &["workspace".into()], None, "/workspace")
            .is_ok());
        let pvc = json!([{ "name": "workspace", "persistentVolumeClaim": { "claimName": "shared" } }]);
        assert!(persistent_cwd(&template(mount, json!([]), pvc), &[], None, "/workspace").is_ok());
    }

    fn pod(v: serde_json::Value) -> PodSpec {
        serde_json::from_value(v).unwrap()
    }

    fn policy(v: serde_json::Value) -> NetworkPolicy {
        serde_json::from_value(json!({ "metadata": { "name": "p" }, "spec": v })).unwrap()
    }

    #[test]
    fn isolation_gaps_of_a_template() {
        let labels = BTreeMap::from([("app".to_string(), "sandbox".to_string())]);
        let hardened = pod(json!({
            "runtimeClassName": "gvisor",
            "securityContext": { "seccompProfile": { "type": "RuntimeDefault" } },
            "containers": [{ "name": "sandbox" }],
        }));
        let deny_all = policy(json!({ "podSelector": {}, "policyTypes": ["Ingress", "Egress"] }));
        assert_eq!(isolation_gaps(&hardened, &labels, None), Vec::<String>::new());
        assert_eq!(isolation_gaps(&hardened, &labels, Some(Ok(vec![deny_all.clone()]))), Vec::<String>::new());

        // Seccomp: the container's own setting wins over the pod's; init containers count.
        let mut p = hardened.clone();
        p.runtime_class_name = None;
        p.init_containers = Some(vec![serde_json::from_value(json!({ "name": "init",
            "securityContext": { "seccompProfile": { "type": "Unconfined" } } }))
        .unwrap()]);
        let gaps = isolation_gaps(&p, &labels, None);
        assert_eq!(gaps.len(), 2, "{gaps:?}");
        assert!(gaps[0].contains("container(s) init without a seccomp profile"), "{}", gaps[0]);
        assert!(gaps[1].contains("runtimeClassName"), "{}", gaps[1]);
        let bare = pod(json!({ "runtimeClassName": "kata", "containers": [{ "name": "a" }, { "name": "b",
            "securityContext": { "seccompProfile": { "type": "Localhost", "localhostProfile": "x.json" } } }] }));
        assert!(isolation_gaps(&bare, &labels, None)[0].contains("container(s) a without"));

        // Unmanaged: some policy must select the pods and govern both directions.
        let unmanaged = |policies: Vec<NetworkPolicy>| isolation_gaps(&hardened, &labels, Some(Ok(policies)));
        let open = unmanaged(vec![]);
        assert!(open.len() == 1 && open[0].contains("no NetworkPolicy"), "{open:?}");
        let ingress_only = policy(json!({ "podSelector": {} }));
        assert_eq!(unmanaged(vec![ingress_only]).len(), 1, "an unset policyTypes without egress rules is Ingress only");
        let implied = policy(json!({ "podSelector": {}, "egress": [{ "ports": [{ "port": 443 }] }] }));
        assert!(unmanaged(vec![implied]).is_empty(), "egress rules imply Egress");
        let other_pods = policy(json!({ "podSelector": { "matchLabels": { "app": "web" } },
            "policyTypes": ["Ingress", "Egress"] }));
        assert_eq!(unmanaged(vec![other_pods]).len(), 1);
        let by_label = policy(json!({ "podSelector": { "matchExpressions": [{ "key": "app", "operator": "In",
            "values": ["sandbox"] }] }, "policyTypes": ["Egress", "Ingress"] }));
        assert!(unmanaged(vec![by_label]).is_empty());
        let unknown = isolation_gaps(&hardened, &labels, Some(Err("not granted".into())));
        assert!(unknown.len() == 1 && unknown[0].contains("could not be checked (not granted)"), "{unknown:?}");
    }
}
