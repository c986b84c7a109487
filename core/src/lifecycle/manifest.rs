//! JSON manifests for the objects `create` makes: a SandboxClaim
//! (warm-pool mode) or a Sandbox (direct mode).

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::names;
use super::resources::{Kind, EXTENSIONS_GROUP, SANDBOX_GROUP, VERSION};
use crate::config::{DirectMode, ProviderConfig, SecurityProfile, WarmPoolMode, VOLUME_NAME};

/// Keeps PID 1 alive without doing anything and exits at once on SIGTERM, so
/// suspend (which deletes the pod) does not wait out the grace period.
pub(crate) const KEEPALIVE: [&str; 3] = ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"];

/// Name of the container in direct mode.
pub(crate) const CONTAINER_NAME: &str = "sandbox";

/// The uid, gid and `fsGroup` of a `"restricted"` pod. Not root, so
/// `runAsNonRoot` holds whatever user the image names; 1000 is the first
/// regular user of Debian/Ubuntu-style images (`ubuntu`, `node`), so where
/// the image has one its home directory and files fit. `fsGroup` makes the
/// kubelet give the volume at cwd to this group, so it stays writable.
pub(crate) const RESTRICTED_ID: i64 = 1000;

/// The pod- and container-level `securityContext` of `profile`: what the
/// Pod Security Standard of that name requires, plus the seccomp default
/// and no privilege escalation for `"baseline"` as well.
fn security_contexts(profile: SecurityProfile) -> (Value, Value) {
    let seccomp = json!({ "type": "RuntimeDefault" });
    match profile {
        SecurityProfile::Restricted => (
            json!({
                "runAsNonRoot": true,
                "runAsUser": RESTRICTED_ID,
                "runAsGroup": RESTRICTED_ID,
                "fsGroup": RESTRICTED_ID,
                // Re-own the volume only when its top directory is not the
                // group's yet: a large workspace is not walked on every resume.
                "fsGroupChangePolicy": "OnRootMismatch",
                "seccompProfile": seccomp,
            }),
            json!({ "allowPrivilegeEscalation": false, "capabilities": { "drop": ["ALL"] } }),
        ),
        SecurityProfile::Baseline => {
            (json!({ "seccompProfile": seccomp }), json!({ "allowPrivilegeEscalation": false }))
        }
    }
}

/// Shared metadata: user labels/annotations first, ours win.
fn metadata(
    name: &str,
    namespace: &str,
    actor_id: &str,
    config: &ProviderConfig,
    user_labels: &BTreeMap<String, String>,
    user_annotations: &BTreeMap<String, String>,
) -> Value {
    let mut labels = user_labels.clone();
    labels.extend(names::labels(actor_id));
    let mut annotations = user_annotations.clone();
    annotations.extend(names::annotations(actor_id, &config.name));
    json!({ "name": name, "namespace": namespace, "labels": labels, "annotations": annotations })
}

/// The SandboxClaim for `actor_id`. `shutdown_time` is the TTL backstop.
pub(crate) fn claim(
    config: &ProviderConfig,
    pool: &WarmPoolMode,
    name: &str,
    namespace: &str,
    actor_id: &str,
    shutdown_time: Option<&str>,
) -> Value {
    let mut spec = Map::new();
    spec.insert("warmPoolRef".into(), json!({ "name": pool.pool }));
    if !pool.pod_labels.is_empty() {
        spec.insert("additionalPodMetadata".into(), json!({ "labels": pool.pod_labels }));
    }
    if !pool.env.is_empty() {
        let env: Vec<Value> = pool.env.iter().map(|(k, v)| json!({ "name": k, "value": v })).collect();
        spec.insert("env".into(), Value::Array(env));
    }
    if !pool.volume_claim_templates.is_empty() {
        spec.insert("volumeClaimTemplates".into(), Value::Array(pool.volume_claim_templates.clone()));
    }
    let mut lifecycle = Map::new();
    if let Some(t) = shutdown_time {
        lifecycle.insert("shutdownTime".into(), json!(t));
    }
    if let Some(s) = pool.shutdown_after_seconds {
        lifecycle.insert("ttlSecondsAfterFinished".into(), json!(s));
    }
    if !lifecycle.is_empty() {
        lifecycle.insert("shutdownPolicy".into(), json!("Delete"));
        spec.insert("lifecycle".into(), Value::Object(lifecycle));
    }
    json!({
        "apiVersion": format!("{EXTENSIONS_GROUP}/{VERSION}"),
        "kind": "SandboxClaim",
        "metadata": metadata(name, namespace, actor_id, config, &pool.labels, &pool.annotations),
        "spec": spec,
    })
}

/// The Sandbox for `actor_id` in direct mode.
pub(crate) fn sandbox(
    config: &ProviderConfig,
    d: &DirectMode,
    name: &str,
    namespace: &str,
    actor_id: &str,
    shutdown_time: Option<&str>,
) -> Value {
    let (pod_security, container_security) = security_contexts(d.security_profile);
    let mut container = json!({
        "name": CONTAINER_NAME,
        "image": d.image,
        "command": KEEPALIVE,
        "workingDir": config.cwd,
        "securityContext": container_security,
    });
    if !d.env.is_empty() {
        container["env"] = d.env.iter().map(|(k, v)| json!({ "name": k, "value": v })).collect();
    }
    if !d.resources.is_empty() {
        container["resources"] = json!({ "requests": d.resources, "limits": d.resources });
    }
    let mut pod_spec = json!({
        // The agent's commands run here: never hand them the pod's API token,
        // nor a list of the namespace's Services in their environment.
        "automountServiceAccountToken": false,
        "enableServiceLinks": false,
        "securityContext": pod_security,
        "containers": [container],
    });
    if let Some(sa) = &d.service_account_name {
        pod_spec["serviceAccountName"] = json!(sa);
    }
    if let Some(rc) = &d.runtime_class_name {
        pod_spec["runtimeClassName"] = json!(rc);
    }
    let mut pod_labels = d.labels.clone();
    pod_labels.extend(names::labels(actor_id));
    let mut pod_template = json!({
        "metadata": { "labels": pod_labels, "annotations": d.annotations },
        "spec": pod_spec,
    });
    let mut spec = Map::new();
    if let Some(v) = &d.volume {
        pod_template["spec"]["containers"][0]["volumeMounts"] = json!([{ "name": VOLUME_NAME, "mountPath": v.path }]);
        let mut pvc = json!({
            "accessModes": ["ReadWriteOnce"],
            "resources": { "requests": { "storage": v.size } },
        });
        if let Some(sc) = &v.storage_class_name {
            pvc["storageClassName"] = json!(sc);
        }
        spec.insert("volumeClaimTemplates".into(), json!([{ "metadata": { "name": VOLUME_NAME }, "spec": pvc }]));
    }
    if let Some(user) = &d.pod_template {
        merge_patch(&mut pod_template, user);
    }
    spec.insert("podTemplate".into(), pod_template);
    spec.insert("operatingMode".into(), json!("Running"));
    if d.service {
        spec.insert("service".into(), json!(true));
    }
    if let Some(t) = shutdown_time {
        spec.insert("shutdownTime".into(), json!(t));
        spec.insert("shutdownPolicy".into(), json!("Delete"));
    }
    json!({
        "apiVersion": format!("{SANDBOX_GROUP}/{VERSION}"),
        "kind": "Sandbox",
        "metadata": metadata(name, namespace, actor_id, config, &d.labels, &d.annotations),
        "spec": spec,
    })
}

/// The merge patch that moves the TTL backstop to `shutdown_time`.
pub(crate) fn ttl_patch(kind: Kind, shutdown_time: &str) -> Value {
    let fields = json!({ "shutdownTime": shutdown_time, "shutdownPolicy": "Delete" });
    match kind {
        Kind::SandboxClaim => json!({ "spec": { "lifecycle": fields } }),
        _ => json!({ "spec": fields }),
    }
}

/// RFC 7386 JSON merge patch: objects merge recursively, `null` deletes,
/// anything else (arrays included) replaces.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else { return };
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{self, Mode};

    fn config(v: Value) -> ProviderConfig {
        config::parse(&v).unwrap()
    }

    fn sandbox_pod(c: &ProviderConfig, d: &DirectMode) -> Value {
        sandbox(c, d, "sbx-1", "ns", "actor", None)["spec"]["podTemplate"]["spec"].clone()
    }

    #[test]
    fn direct_sandbox_manifest() {
        let c = config(json!({
            "namespace": "ns", "sandbox": {
                "image": "img", "volume": { "size": "1Gi" }, "resources": { "cpu": "1" },
                "env": { "A": "b" }, "labels": { "team": "t" },
                "podTemplate": { "spec": { "nodeSelector": { "n": "1" } } }
            }
        }));
        let Mode::Direct(d) = &c.mode else { panic!() };
        let m = sandbox(&c, d, "sbx-1", "ns", "actor", Some("2030-01-01T00:00:00Z"));
        let pod = &m["spec"]["podTemplate"]["spec"];
        assert_eq!(pod["automountServiceAccountToken"], json!(false));
        assert_eq!(pod["containers"][0]["command"], json!(KEEPALIVE));
        assert_eq!(pod["containers"][0]["volumeMounts"][0]["mountPath"], json!("/workspace"));
        assert_eq!(pod["containers"][0]["resources"]["limits"]["cpu"], json!("1"));
        assert_eq!(pod["nodeSelector"]["n"], json!("1"));
        assert_eq!(m["spec"]["volumeClaimTemplates"][0]["metadata"]["name"], json!("workspace"));
        assert_eq!(m["spec"]["shutdownPolicy"], json!("Delete"));
        assert_eq!(m["metadata"]["labels"]["team"], json!("t"));
        assert_eq!(m["metadata"]["annotations"][names::ACTOR_ANNOTATION], json!("actor"));
        // No Service unless asked: unset keeps the controller from making one.
        assert_eq!(m["spec"].get("service"), None);
        let c = config(json!({ "namespace": "ns", "suspend": "none", "sandbox": { "image": "img", "service": true } }));
        let Mode::Direct(d) = &c.mode else { panic!() };
        assert_eq!(sandbox(&c, d, "sbx-1", "ns", "actor", None)["spec"]["service"], json!(true));
    }

    /// The default pod meets the Pod Security Standard "restricted" (the
    /// fields it checks), and "baseline" keeps the image's user.
    #[test]
    fn security_profiles() {
        let direct = |extra: Value| {
            let mut sandbox = json!({ "image": "img" });
            sandbox.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            let c = config(json!({ "suspend": "none", "sandbox": sandbox }));
            let Mode::Direct(d) = &c.mode else { panic!() };
            sandbox_pod(&c, d)
        };
        let pod = direct(json!({}));
        let ctx = &pod["securityContext"];
        assert_eq!(ctx["runAsNonRoot"], json!(true));
        assert_eq!(
            (&ctx["runAsUser"], &ctx["runAsGroup"], &ctx["fsGroup"]),
            (&json!(1000), &json!(1000), &json!(1000))
        );
        assert_eq!(ctx["seccompProfile"]["type"], json!("RuntimeDefault"));
        let c = &pod["containers"][0]["securityContext"];
        assert_eq!(c["allowPrivilegeEscalation"], json!(false));
        assert_eq!(c["capabilities"]["drop"], json!(["ALL"]));
        assert_eq!(pod["enableServiceLinks"], json!(false));
        assert_eq!(pod["automountServiceAccountToken"], json!(false));

        let pod = direct(json!({ "securityProfile": "baseline" }));
        assert_eq!(pod["securityContext"], json!({ "seccompProfile": { "type": "RuntimeDefault" } }));
        assert_eq!(pod["containers"][0]["securityContext"], json!({ "allowPrivilegeEscalation": false }));
        assert_eq!(pod["automountServiceAccountToken"], json!(false));

        // podTemplate is merged last: an image with another non-root user sets it.
        let pod = direct(json!({ "podTemplate": { "spec": { "securityContext": { "runAsUser": 65532 } } } }));
        assert_eq!(pod["securityContext"]["runAsUser"], json!(65532));
        assert_eq!(pod["securityContext"]["runAsNonRoot"], json!(true));
    }

    #[test]
    fn claim_manifest() {
        let c = config(json!({
            "warmPool": "pool", "claim": { "env": { "A": "1" }, "podLabels": { "sandbox.users.io/x": "y" }, "shutdownAfterSeconds": 60 }
        }));
        let Mode::WarmPool(w) = &c.mode else { panic!() };
        let m = claim(&c, w, "sbx-1", "ns", "actor", None);
        assert_eq!(m["spec"]["warmPoolRef"]["name"], json!("pool"));
        assert_eq!(m["spec"]["env"][0], json!({ "name": "A", "value": "1" }));
        assert_eq!(m["spec"]["lifecycle"], json!({ "ttlSecondsAfterFinished": 60, "shutdownPolicy": "Delete" }));
        assert_eq!(m["spec"]["additionalPodMetadata"]["labels"]["sandbox.users.io/x"], json!("y"));
    }

    #[test]
    fn merge_patch_rfc7386() {
        let mut t = json!({ "a": { "b": 1, "c": 2 }, "l": [1] });
        merge_patch(&mut t, &json!({ "a": { "b": null, "d": 3 }, "l": [2] }));
        assert_eq!(t, json!({ "a": { "c": 2, "d": 3 }, "l": [2] }));
    }
}
