//! The agent-sandbox kinds we speak (v1beta1 only), as partial serde views:
//! only the fields the lifecycle reads. Objects are created from JSON
//! manifests (see [`super::manifest`]) so unknown fields never get dropped.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodSpec;
use kube::core::{ApiResource, GroupVersionKind, Object};
use kube::{Api, Client};
use serde::Deserialize;

/// API group of Sandbox.
pub(crate) const SANDBOX_GROUP: &str = "agents.x-k8s.io";
/// API group of SandboxClaim, SandboxTemplate, SandboxWarmPool.
pub(crate) const EXTENSIONS_GROUP: &str = "extensions.agents.x-k8s.io";
/// Label the controller puts on a claimed Sandbox: `warm` (adopted from the
/// pool) or `cold`.
pub(crate) const LAUNCH_TYPE_LABEL: &str = "agents.x-k8s.io/launch-type";
/// The only version we speak.
pub(crate) const VERSION: &str = "v1beta1";

/// The four kinds, with their plural resource names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `sandboxes.agents.x-k8s.io`
    Sandbox,
    /// `sandboxclaims.extensions.agents.x-k8s.io`
    SandboxClaim,
    /// `sandboxwarmpools.extensions.agents.x-k8s.io`
    SandboxWarmPool,
    /// `sandboxtemplates.extensions.agents.x-k8s.io`
    SandboxTemplate,
}

impl Kind {
    /// The `ApiResource` for dynamic `Api`s.
    pub(crate) fn api_resource(self) -> ApiResource {
        let (group, kind, plural) = match self {
            Kind::Sandbox => (SANDBOX_GROUP, "Sandbox", "sandboxes"),
            Kind::SandboxClaim => (EXTENSIONS_GROUP, "SandboxClaim", "sandboxclaims"),
            Kind::SandboxWarmPool => (EXTENSIONS_GROUP, "SandboxWarmPool", "sandboxwarmpools"),
            Kind::SandboxTemplate => (EXTENSIONS_GROUP, "SandboxTemplate", "sandboxtemplates"),
        };
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, VERSION, kind), plural)
    }

    /// `plural.group`, as RBAC and error messages name it.
    pub(crate) fn resource(self) -> &'static str {
        match self {
            Kind::Sandbox => "sandboxes.agents.x-k8s.io",
            Kind::SandboxClaim => "sandboxclaims.extensions.agents.x-k8s.io",
            Kind::SandboxWarmPool => "sandboxwarmpools.extensions.agents.x-k8s.io",
            Kind::SandboxTemplate => "sandboxtemplates.extensions.agents.x-k8s.io",
        }
    }

    /// A namespaced `Api` for this kind with the view type `K`.
    pub(crate) fn api<P: Clone, U: Clone>(self, client: &Client, namespace: &str) -> Api<Object<P, U>> {
        Api::namespaced_with(client.clone(), namespace, &self.api_resource())
    }
}

/// A status condition (metav1.Condition); every field optional so a partial
/// status from an older controller still parses.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Condition {
    /// Condition type, e.g. `Ready`.
    #[serde(rename = "type")]
    pub type_: String,
    /// "True", "False" or "Unknown".
    #[serde(default)]
    pub status: String,
    /// Machine-readable reason.
    #[serde(default)]
    pub reason: String,
    /// Human-readable message.
    #[serde(default)]
    pub message: String,
    /// The `metadata.generation` the condition was computed for.
    pub observed_generation: Option<i64>,
}

impl Condition {
    /// Status is "True".
    pub(crate) fn is_true(&self) -> bool {
        self.status == "True"
    }
    /// Computed for the object's current generation.
    pub(crate) fn is_current(&self, generation: Option<i64>) -> bool {
        generation.is_some() && self.observed_generation == generation
    }
    /// "reason: message" for error texts.
    pub(crate) fn describe(&self) -> String {
        match (self.reason.is_empty(), self.message.is_empty()) {
            (false, false) => format!("{}: {}", self.reason, self.message),
            (false, true) => self.reason.clone(),
            _ => self.message.clone(),
        }
    }
}

/// The object is being deleted (it will not come back: connect treats it
/// as gone).
pub(crate) fn deleting<P: Clone, U: Clone>(object: &Object<P, U>) -> bool {
    object.metadata.deletion_timestamp.is_some()
}

/// The condition of `type_` in `conditions`.
pub(crate) fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Sandbox spec fields we read.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SandboxSpec {
    /// `Running` (default) or `Suspended`.
    pub operating_mode: Option<String>,
    /// RFC 3339 expiry.
    pub shutdown_time: Option<String>,
}

impl SandboxSpec {
    /// The sandbox is (being) suspended.
    pub(crate) fn is_suspended(&self) -> bool {
        self.operating_mode.as_deref() == Some("Suspended")
    }
}

/// Sandbox status fields we read.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SandboxStatus {
    /// Ready, Suspended, PodScheduled, Finished.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// `<service>.<namespace>.svc.<cluster domain>` when the Sandbox has a
    /// Service; empty or absent without one.
    #[serde(rename = "serviceFQDN")]
    pub service_fqdn: Option<String>,
}

/// A Sandbox (`agents.x-k8s.io/v1beta1`).
pub(crate) type SandboxObject = Object<SandboxSpec, SandboxStatus>;

/// SandboxClaim spec fields we read.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClaimSpec {
    /// `lifecycle` (shutdownTime etc.).
    pub lifecycle: Option<ClaimLifecycle>,
}

/// `spec.lifecycle` of a claim.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClaimLifecycle {
    /// RFC 3339 expiry.
    pub shutdown_time: Option<String>,
}

/// SandboxClaim status fields we read.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClaimStatus {
    /// `Ready` (forwarded from the Sandbox once bound) and `Finished`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The bound Sandbox.
    pub sandbox: Option<ClaimSandboxRef>,
}

/// `status.sandbox` of a claim.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct ClaimSandboxRef {
    /// Sandbox name: the claim's name on a cold start, a pool member on adoption.
    #[serde(default)]
    pub name: String,
}

/// A SandboxClaim (`extensions.agents.x-k8s.io/v1beta1`).
pub(crate) type ClaimObject = Object<ClaimSpec, ClaimStatus>;

/// The bound Sandbox's name, once the claim controller has set it.
pub(crate) fn bound_sandbox(claim: &ClaimObject) -> Option<&str> {
    claim.status.as_ref()?.sandbox.as_ref().map(|s| s.name.as_str()).filter(|n| !n.is_empty())
}

/// SandboxWarmPool spec fields we read.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WarmPoolSpec {
    /// The template the pool's sandboxes are built from.
    pub sandbox_template_ref: NameRef,
}

/// `{ name }`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct NameRef {
    /// Object name.
    pub name: String,
}

/// A SandboxWarmPool.
pub(crate) type WarmPoolObject = Object<WarmPoolSpec, serde_json::Value>;

/// SandboxTemplate spec fields we read (pod, volumes, network policy).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TemplateSpec {
    /// The pod template.
    pub pod_template: PodTemplateView,
    /// `Managed` (the default: the controller makes a NetworkPolicy for the
    /// template's pods) or `Unmanaged` (left to the namespace).
    pub network_policy_management: Option<String>,
    /// PVCs created per sandbox; each injects a pod volume of the same name.
    #[serde(default)]
    pub volume_claim_templates: Vec<VolumeClaimTemplate>,
}

/// `podTemplate` of a blueprint.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct PodTemplateView {
    /// The pod's labels (and annotations, unread).
    #[serde(default)]
    pub metadata: PodMetadataView,
    /// The pod spec.
    pub spec: PodSpec,
}

/// `podTemplate.metadata` of a blueprint.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct PodMetadataView {
    /// Labels the pod gets.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// A `volumeClaimTemplates` entry.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct VolumeClaimTemplate {
    /// `metadata.name`: the pod volume name.
    #[serde(default)]
    pub metadata: VctMeta,
}

/// `metadata` of a volume claim template.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct VctMeta {
    /// Volume name.
    #[serde(default)]
    pub name: String,
}

/// A SandboxTemplate (no status).
pub(crate) type TemplateObject = Object<TemplateSpec, serde_json::Value>;
