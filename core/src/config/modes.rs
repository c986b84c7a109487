//! The two provisioning modes: `warmPool` (SandboxClaims) and `sandbox`
//! (Sandboxes created directly).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaimSpec, PodSpec};
use serde_json::Value;

use super::fields::{any, Fields};
use super::validate;
use crate::error::Result;

/// How sandboxes are provisioned.
#[derive(Debug, Clone)]
pub(crate) enum Mode {
    /// A SandboxClaim against a SandboxWarmPool.
    WarmPool(WarmPoolMode),
    /// A Sandbox object built from [`DirectMode`].
    Direct(DirectMode),
}

/// `warmPool` + `claim` options.
#[derive(Clone)]
pub(crate) struct WarmPoolMode {
    /// SandboxWarmPool name (`spec.warmPoolRef.name` of the claim).
    pub pool: String,
    /// Labels on the claim object.
    pub labels: BTreeMap<String, String>,
    /// Labels added to the pod (`spec.additionalPodMetadata.labels`).
    pub pod_labels: BTreeMap<String, String>,
    /// Annotations on the claim object.
    pub annotations: BTreeMap<String, String>,
    /// Claim `spec.env` (forces a cold start; needs the template's
    /// `envVarsInjectionPolicy`).
    pub env: BTreeMap<String, String>,
    /// Claim `spec.volumeClaimTemplates` (forces a cold start; needs the
    /// template's `volumeClaimTemplatesPolicy`). Each entry is checked to be a
    /// PVC template with a name.
    pub volume_claim_templates: Vec<Value>,
    /// Claim `spec.lifecycle.ttlSecondsAfterFinished`.
    pub shutdown_after_seconds: Option<u64>,
}

/// `sandbox` options: the pod of a directly created Sandbox.
#[derive(Clone)]
pub(crate) struct DirectMode {
    /// Container image.
    pub image: String,
    /// Requests = limits for cpu, memory, ephemeral-storage.
    pub resources: BTreeMap<&'static str, String>,
    /// Pod `runtimeClassName` (e.g. gvisor, kata).
    pub runtime_class_name: Option<String>,
    /// A persistent volume (PVC per sandbox) mounted at `path`.
    pub volume: Option<VolumeOptions>,
    /// Pod `serviceAccountName` (its token is never mounted).
    pub service_account_name: Option<String>,
    /// Container environment.
    pub env: BTreeMap<String, String>,
    /// Labels on the Sandbox object and its pod.
    pub labels: BTreeMap<String, String>,
    /// Annotations on the Sandbox object and its pod.
    pub annotations: BTreeMap<String, String>,
    /// The pod's and container's security settings.
    pub security_profile: SecurityProfile,
    /// Give the Sandbox a headless Service (`spec.service`), so its pod has
    /// a cluster DNS name (`sandbox.url(port)`).
    pub service: bool,
    /// `{ metadata?, spec? }` merged over the generated pod template
    /// (RFC 7386 JSON merge patch: objects merge, arrays replace).
    pub pod_template: Option<Value>,
}

/// `sandbox.securityProfile`: which Pod Security Standard the direct-mode
/// pod meets. Both keep the API token unmounted, service links off,
/// privilege escalation off and seccomp at the runtime's default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SecurityProfile {
    /// "restricted" (the default): non-root (uid/gid 1000, `fsGroup` 1000 so
    /// the volume at cwd stays writable), every capability dropped.
    Restricted,
    /// "baseline": runs as the image's user (root for most images, so the
    /// agent can install packages) with the runtime's default capabilities;
    /// pair it with a RuntimeClass (gVisor, Kata).
    Baseline,
}

/// `sandbox.volume`.
#[derive(Debug, Clone)]
pub(crate) struct VolumeOptions {
    /// PVC size, e.g. "10Gi".
    pub size: String,
    /// Mount path; defaults to the provider's `cwd`.
    pub path: String,
    /// Storage class; the cluster default when omitted.
    pub storage_class_name: Option<String>,
}

// Debug shows environment variable names only: values may be secrets (API
// keys handed to the sandbox), and so may a pod template's env.
impl std::fmt::Debug for WarmPoolMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WarmPoolMode")
            .field("pool", &self.pool)
            .field("labels", &self.labels)
            .field("pod_labels", &self.pod_labels)
            .field("annotations", &self.annotations)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("volume_claim_templates", &self.volume_claim_templates.len())
            .field("shutdown_after_seconds", &self.shutdown_after_seconds)
            .finish()
    }
}

impl std::fmt::Debug for DirectMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectMode")
            .field("image", &self.image)
            .field("resources", &self.resources)
            .field("runtime_class_name", &self.runtime_class_name)
            .field("volume", &self.volume)
            .field("service_account_name", &self.service_account_name)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("labels", &self.labels)
            .field("annotations", &self.annotations)
            .field("security_profile", &self.security_profile)
            .field("service", &self.service)
            .field("pod_template", &self.pod_template.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// The volume name used for `sandbox.volume` (PVC `workspace-<sandbox>`).
pub(crate) const VOLUME_NAME: &str = "workspace";

/// Parses `claim` for warm-pool mode (`claim` absent → defaults).
pub(crate) fn parse_warm_pool(pool: String, claim: Option<Fields<'_>>) -> Result<WarmPoolMode> {
    let mut mode = WarmPoolMode {
        pool,
        labels: BTreeMap::new(),
        pod_labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        env: BTreeMap::new(),
        volume_claim_templates: Vec::new(),
        shutdown_after_seconds: None,
    };
    let Some(mut c) = claim else { return Ok(mode) };
    mode.labels = c.string_map("labels", validate::qualified_key, validate::label_value)?;
    mode.pod_labels = c.string_map("podLabels", validate::qualified_key, validate::label_value)?;
    mode.annotations = c.string_map("annotations", validate::qualified_key, any)?;
    mode.env = c.string_map("env", validate::env_name, any)?;
    if let Some(list) = c.get::<Vec<Value>>("volumeClaimTemplates")? {
        for (i, vct) in list.iter().enumerate() {
            check_vct(vct).map_err(|e| c.error("volumeClaimTemplates", format!("entry {i}: {e}")))?;
        }
        mode.volume_claim_templates = list;
    }
    mode.shutdown_after_seconds = c.positive_int("shutdownAfterSeconds", 10 * 365 * 86_400)?;
    c.finish()?;
    Ok(mode)
}

/// A claim volume claim template needs `metadata.name` and a PVC `spec`.
fn check_vct(vct: &Value) -> std::result::Result<(), String> {
    let name = vct.pointer("/metadata/name").and_then(Value::as_str).ok_or("`metadata.name` is required")?;
    validate::dns_label(name)?;
    let spec = vct.get("spec").ok_or("`spec` (a PersistentVolumeClaimSpec) is required")?;
    serde_json::from_value::<PersistentVolumeClaimSpec>(spec.clone())
        .map(drop)
        .map_err(|e| format!("`spec` is not a PersistentVolumeClaimSpec: {e}"))
}

/// Parses `sandbox` for direct mode; `cwd` is the default volume path.
pub(crate) fn parse_direct(mut s: Fields<'_>, cwd: &str) -> Result<DirectMode> {
    let image = s.string("image")?.ok_or_else(|| s.error("image", "is required in direct mode"))?;
    if image.chars().any(char::is_whitespace) {
        return Err(s.error("image", format!("{image:?} must not contain whitespace")));
    }
    let mut resources = BTreeMap::new();
    if let Some(mut r) = s.object("resources")? {
        for (key, k8s_name) in [("cpu", "cpu"), ("memory", "memory"), ("ephemeralStorage", "ephemeral-storage")] {
            if let Some(q) = quantity(&mut r, key)? {
                resources.insert(k8s_name, q);
            }
        }
        r.finish()?;
    }
    let runtime_class_name = name_option(&mut s, "runtimeClassName")?;
    let volume = match s.object("volume")? {
        None => None,
        Some(mut v) => {
            let size = quantity(&mut v, "size")?.ok_or_else(|| v.error("size", "is required (e.g. \"10Gi\")"))?;
            let path = v.string("path")?.unwrap_or_else(|| cwd.to_string());
            validate::absolute_path(&path).map_err(|e| v.error("path", e))?;
            let storage_class_name = name_option(&mut v, "storageClassName")?;
            v.finish()?;
            Some(VolumeOptions { size, path, storage_class_name })
        }
    };
    let service_account_name = name_option(&mut s, "serviceAccountName")?;
    let env = s.string_map("env", validate::env_name, any)?;
    let labels = s.string_map("labels", validate::qualified_key, validate::label_value)?;
    let annotations = s.string_map("annotations", validate::qualified_key, any)?;
    let security_profile = match s.string("securityProfile")?.as_deref() {
        None | Some("restricted") => SecurityProfile::Restricted,
        Some("baseline") => SecurityProfile::Baseline,
        Some(other) => {
            return Err(s.error("securityProfile", format!("must be \"restricted\" or \"baseline\", got {other:?}")))
        }
    };
    let service = s.get::<bool>("service")?.unwrap_or(false);
    let pod_template = s.raw("podTemplate").cloned();
    if let Some(t) = &pod_template {
        let mut f = Fields::new(&s.name("podTemplate"), t)?;
        if let Some(spec) = f.raw("spec") {
            serde_json::from_value::<PodSpec>(spec.clone())
                .map_err(|e| f.error("spec", format!("is not a PodSpec: {e}")))?;
        }
        f.raw("metadata");
        f.finish()?;
    }
    s.finish()?;
    Ok(DirectMode {
        image,
        resources,
        runtime_class_name,
        volume,
        service_account_name,
        env,
        labels,
        annotations,
        security_profile,
        service,
        pod_template,
    })
}

/// The largest quantity given as a number: JavaScript holds no larger
/// integer exactly, and 2^53 bytes or cores is beyond any pod. A number past
/// it (`1e300`, `2 ** 64`) is a mistake, not a request for that much.
const MAX_NUMERIC_QUANTITY: f64 = 9_007_199_254_740_991.0;

/// A quantity given as a string ("500m") or a number (2). A number of
/// bytes (`memory`, `ephemeralStorage`, `size`) must be a whole number; a
/// number of cores (`cpu`) whole millicores, the finest a pod takes.
fn quantity(f: &mut Fields<'_>, key: &'static str) -> Result<Option<String>> {
    let q = match f.raw(key) {
        None => return Ok(None),
        Some(Value::Number(n)) => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            let cpu = key == "cpu";
            if !(0.0..=MAX_NUMERIC_QUANTITY).contains(&x) {
                return Err(f.error(
                    key,
                    format!(
                        "as a number must be from 0 to {MAX_NUMERIC_QUANTITY} (got {n}); use a string with a suffix \
                         such as \"2\", \"500m\" or \"64Gi\""
                    ),
                ));
            }
            // Cores times 1000 carry the binary error of a decimal fraction
            // (1.001 * 1000 is 1000.9999999999999), but 1e-300 is no
            // millicore; bytes are exact.
            let millis = x * 1000.0;
            let whole = if cpu {
                (millis - millis.round()).abs() < 1e-6 && (millis.round() != 0.0 || x == 0.0)
            } else {
                x.fract() == 0.0
            };
            if !whole {
                let unit = if cpu { "whole millicores (0.001)" } else { "whole bytes" };
                return Err(
                    f.error(key, format!("as a number must be in {unit} (got {n}); or a string such as \"500m\""))
                );
            }
            n.to_string()
        }
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(f.error(key, "must be a quantity string such as \"500m\" or \"2Gi\"")),
    };
    validate::quantity(&q).map_err(|e| f.error(key, e))?;
    Ok(Some(q))
}

fn name_option(f: &mut Fields<'_>, key: &'static str) -> Result<Option<String>> {
    let v = f.string(key)?;
    if let Some(n) = &v {
        validate::dns_subdomain(n).map_err(|e| f.error(key, e))?;
    }
    Ok(v)
}
