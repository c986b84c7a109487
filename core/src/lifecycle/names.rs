//! Sandbox ids, object names derived from actor ids, and the labels that
//! mark an object as ours.
//!
//! The object name is a hash of the actor id, so a `create` retried after a
//! crash (before Rivet saved the id) finds the object it already made
//! instead of leaking a second one.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// Label with a hash of the owning actor id (label values are limited to 63
/// characters of a small alphabet; actor ids are not).
pub(crate) const ACTOR_LABEL: &str = "agent-sandbox-provider/actor-hash";
/// Annotation with the raw actor id.
pub(crate) const ACTOR_ANNOTATION: &str = "agent-sandbox-provider/actor-id";
/// Annotation naming the exec engine (its instance id) that last took the
/// sandbox's pod over: swept it, created it or resumed it. While it names
/// this process's engine, no other process has run commands there since
/// (see `Provider::connect`). It is on the object the id names, which the
/// provider made: the claim in warm-pool mode (the Sandbox is the pool's
/// until claimed), the Sandbox in direct mode.
pub(crate) const SWEPT_BY_ANNOTATION: &str = "agent-sandbox-provider/swept-by";
/// Annotation with the provider name that created the object.
pub(crate) const PROVIDER_ANNOTATION: &str = "agent-sandbox-provider/provider-name";
/// Standard label naming the managing tool.
pub(crate) const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`].
pub(crate) const MANAGED_BY: &str = "agent-sandbox-provider";

/// Where a sandbox lives: the id returned by `create` is `namespace/name`, so
/// it locates the object even if the provider's namespace option changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SandboxId {
    /// Namespace of the claim or Sandbox.
    pub namespace: String,
    /// Name of the claim (warm-pool mode) or Sandbox (direct mode).
    pub name: String,
}

impl SandboxId {
    /// Parses `namespace/name`.
    pub(crate) fn parse(id: &str) -> Result<SandboxId> {
        let bad = || {
            Error::invalid_request(format!("{id:?} is not a sandbox id of this provider (expected \"namespace/name\")"))
        };
        let (ns, name) = id.split_once('/').ok_or_else(bad)?;
        crate::config::validate::dns_label(ns).map_err(|_| bad())?;
        crate::config::validate::dns_subdomain(name).map_err(|_| bad())?;
        Ok(SandboxId { namespace: ns.to_string(), name: name.to_string() })
    }
}

impl fmt::Display for SandboxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

fn sha256_hex(input: &str) -> String {
    Sha256::digest(input.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// The label value for an actor id.
pub(crate) fn actor_hash(actor_id: &str) -> String {
    sha256_hex(actor_id)[..32].to_string()
}

/// The object name for an actor: `sbx-` + 20 hex digits, a DNS-1035 label so
/// the pod, Service (`<name>`) and PVC (`workspace-<name>`) names derived
/// from it are valid too. The mode is part of the hash so a claim and a
/// direct Sandbox of the same actor never collide.
pub(crate) fn object_name(warm_pool: bool, actor_id: &str) -> String {
    let mode = if warm_pool { "claim" } else { "sandbox" };
    format!("sbx-{}", &sha256_hex(&format!("{mode}\0{actor_id}"))[..20])
}

/// Our labels for an actor's object.
pub(crate) fn labels(actor_id: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (ACTOR_LABEL.to_string(), actor_hash(actor_id)),
        (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
    ])
}

/// Our annotations for an actor's object.
pub(crate) fn annotations(actor_id: &str, provider_name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (ACTOR_ANNOTATION.to_string(), actor_id.to_string()),
        (PROVIDER_ANNOTATION.to_string(), provider_name.to_string()),
    ])
}

/// True when the object carries `actor_id`'s label (and annotation, if set).
pub(crate) fn owned_by(meta: &ObjectMeta, actor_id: &str) -> bool {
    let label_ok = meta.labels.as_ref().and_then(|l| l.get(ACTOR_LABEL)) == Some(&actor_hash(actor_id));
    let annotation_ok = meta.annotations.as_ref().and_then(|a| a.get(ACTOR_ANNOTATION)).is_none_or(|a| a == actor_id);
    label_ok && annotation_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_valid_and_mode_specific() {
        let a = object_name(true, "actor/with:odd chars");
        assert_eq!(a, object_name(true, "actor/with:odd chars"));
        assert_ne!(a, object_name(false, "actor/with:odd chars"));
        assert_ne!(a, object_name(true, "other"));
        assert!(crate::config::validate::dns_label(&a).is_ok());
        assert_eq!(a.len(), 24);
        assert!(crate::config::validate::label_value(&actor_hash("x y/z")).is_ok());
    }

    #[test]
    fn ids_round_trip() {
        let id = SandboxId::parse("ns/sbx-1").unwrap();
        assert_eq!(id.to_string(), "ns/sbx-1");
        assert!(SandboxId::parse("nonamespace").is_err());
        assert!(SandboxId::parse("ns/Bad").is_err());
    }

    #[test]
    fn ownership() {
        let meta =
            ObjectMeta { labels: Some(labels("a")), annotations: Some(annotations("a", "p")), ..Default::default() };
        assert!(owned_by(&meta, "a"));
        assert!(!owned_by(&meta, "b"));
        assert!(!owned_by(&ObjectMeta::default(), "a"));
    }
}
