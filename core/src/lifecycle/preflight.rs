//! Checks made by `create` in warm-pool mode before claiming: the pool
//! exists, and with `suspend: "pod"` its template keeps `cwd` on a
//! persistent volume (otherwise every suspend would silently lose the files).
//! [`PoolCheck`] remembers a passed check for a while, so a burst of creates
//! costs one check instead of two extra round trips each.

use std::time::Duration;

use kube::Client;
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::resources::{Kind, TemplateObject, TemplateSpec, WarmPoolObject};
use crate::client::{api_error, Action};
use crate::config::{validate, SuspendPolicy, WarmPoolMode};
use crate::error::{Error, ErrorCode, Result};

/// What the check needs from the provider config.
pub struct Checked<'a> {
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
pub struct PoolCheck {
    /// When the check last passed. Held across the check, so concurrent
    /// creates wait for one check instead of each making their own.
    passed_at: Mutex<Option<Instant>>,
}

impl PoolCheck {
    /// Runs [`check_warm_pool`] unless it passed less than [`RECHECK_AFTER`] ago.
    pub async fn ensure(&self, client: &Client, namespace: &str, c: &Checked<'_>) -> Result<()> {
        let mut passed_at = self.passed_at.lock().await;
        if passed_at.is_some_and(|t| t.elapsed() < RECHECK_AFTER) {
            return Ok(());
        }
        check_warm_pool(client, namespace, c).await?;
        *passed_at = Some(Instant::now());
        Ok(())
    }
}

/// Verifies the pool (and, for `suspend: "pod"`, its template).
async fn check_warm_pool(client: &Client, namespace: &str, c: &Checked<'_>) -> Result<()> {
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
    if c.suspend == SuspendPolicy::None {
        return Ok(());
    }
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
    })
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
pub fn persistent_cwd(
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
}
