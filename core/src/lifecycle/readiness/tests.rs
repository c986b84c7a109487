use super::*;
use serde_json::{json, Value};

fn sandbox(generation: i64, mode: &str, conditions: Value) -> SandboxObject {
    serde_json::from_value(json!({
        "metadata": { "name": "s", "generation": generation },
        "spec": { "operatingMode": mode },
        "status": { "conditions": conditions },
    }))
    .unwrap()
}

fn ready(status: &str, reason: &str, generation: i64) -> Value {
    json!({ "type": "Ready", "status": status, "reason": reason, "message": "m", "observedGeneration": generation })
}

/// A pod scheduled to node `n`.
fn pod(status: Value) -> Pod {
    serde_json::from_value(json!({ "metadata": { "name": "s" }, "spec": { "nodeName": "n" }, "status": status }))
        .unwrap()
}

#[test]
fn ready_needs_current_generation_and_live_pod() {
    let p = pod(json!({ "phase": "Running" }));
    let sb = sandbox(2, "Running", json!([ready("True", "DependenciesReady", 2)]));
    assert_eq!(sandbox_readiness(&sb, Some(&p)), Readiness::Ready);
    // Ready from an older generation (stale status) does not count.
    let stale = sandbox(3, "Running", json!([ready("True", "DependenciesReady", 2)]));
    assert!(matches!(sandbox_readiness(&stale, Some(&p)), Readiness::Waiting(_)));
    // No pod yet, or only a terminating one.
    assert!(matches!(sandbox_readiness(&sb, None), Readiness::Waiting(_)));
    let mut dying = p.clone();
    dying.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()));
    assert!(matches!(sandbox_readiness(&sb, Some(&dying)), Readiness::Waiting(_)));
    // A Ready condition left from a replaced pod: the new one is not scheduled
    // or not running yet.
    let mut unscheduled = pod(json!({ "phase": "Pending" }));
    unscheduled.spec = None;
    assert!(matches!(sandbox_readiness(&sb, Some(&unscheduled)), Readiness::Waiting(_)));
    assert!(matches!(sandbox_readiness(&sb, Some(&pod(json!({ "phase": "Pending" })))), Readiness::Waiting(_)));
}

#[test]
fn terminal_reasons_fail() {
    let sb = sandbox(1, "Running", json!([ready("False", "PodFailed", 1)]));
    assert!(matches!(sandbox_readiness(&sb, None), Readiness::Failed(m) if m.contains("PodFailed")));
    let sb = sandbox(1, "Running", json!([ready("False", "DependenciesNotReady", 1)]));
    let pulling = pod(json!({ "phase": "Pending", "containerStatuses": [{
        "name": "sandbox", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
        "state": { "waiting": { "reason": "ImagePullBackOff", "message": "back-off pulling x" } } }] }));
    match sandbox_readiness(&sb, Some(&pulling)) {
        Readiness::Failed(m) => assert!(m.contains("ImagePullBackOff") && m.contains("back-off pulling x"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_pod_on_its_way_out_is_no_failure() {
    // A kubelet reports a deleted pod Succeeded once its containers stopped
    // (seen on the real node after `kubectl delete pod`); the controller then
    // makes a new one of the same name.
    let mut going = pod(json!({ "phase": "Succeeded" }));
    going.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()));
    let running = sandbox(1, "Running", json!([ready("True", "DependenciesReady", 1)]));
    assert!(matches!(sandbox_readiness(&running, Some(&going)), Readiness::Waiting(_)));
    let described = sandbox(1, "Running", json!([ready("False", "PodSucceeded", 1)]));
    assert!(matches!(sandbox_readiness(&described, Some(&going)), Readiness::Waiting(_)));
    // The same pod, not being deleted, has ended for good.
    let ended = pod(json!({ "phase": "Succeeded" }));
    assert!(matches!(sandbox_readiness(&running, Some(&ended)), Readiness::Failed(m) if m.contains("pod Succeeded")));
    assert!(matches!(sandbox_readiness(&described, Some(&ended)), Readiness::Failed(_)));
    // Other terminal reasons stay terminal whatever the pod does.
    let expired = sandbox(1, "Running", json!([ready("False", "SandboxExpired", 1)]));
    assert!(matches!(sandbox_readiness(&expired, Some(&going)), Readiness::Failed(_)));
}

#[test]
fn a_pod_refused_by_admission_fails_other_controller_errors_wait() {
    let error = |message: &str| {
        let c = json!({ "type": "Ready", "status": "False", "reason": "ReconcilerError", "message": message,
            "observedGeneration": 1 });
        sandbox(1, "Running", json!([c]))
    };
    let pss =
        error(r#"Error seen: pods "s" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true"#);
    assert!(
        matches!(sandbox_readiness(&pss, None), Readiness::Failed(m) if m.contains("refused") && m.contains("runAsNonRoot"))
    );
    let vap =
        error(r#"Error seen: pods "s" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: x"#);
    assert!(matches!(sandbox_readiness(&vap, None), Readiness::Failed(_)));
    let quota = error(r#"Error seen: pods "s" is forbidden: exceeded quota: q, requested: pods=1"#);
    assert!(matches!(sandbox_readiness(&quota, None), Readiness::Waiting(m) if m.contains("exceeded quota")));
}

#[test]
fn unschedulable_is_reported_while_waiting() {
    let sb = sandbox(1, "Running", json!([ready("False", "DependenciesNotReady", 1)]));
    let p = pod(json!({ "phase": "Pending", "conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/1 nodes are available" }] }));
    match sandbox_readiness(&sb, Some(&p)) {
        Readiness::Waiting(m) => assert!(m.contains("Unschedulable") && m.contains("0/1 nodes"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn suspension() {
    let suspended =
        json!({ "type": "Suspended", "status": "True", "reason": "PodTerminated", "observedGeneration": 4 });
    assert!(is_suspended(&sandbox(4, "Suspended", json!([suspended.clone()]))));
    assert!(!is_suspended(&sandbox(5, "Suspended", json!([suspended.clone()]))));
    assert!(!is_suspended(&sandbox(4, "Running", json!([suspended]))));
    let sb = sandbox(4, "Suspended", json!([ready("True", "DependenciesReady", 4)]));
    assert!(matches!(sandbox_readiness(&sb, None), Readiness::Waiting(m) if m.contains("suspended")));
}

#[test]
fn claims() {
    let claim = |status: Value| -> ClaimObject {
        serde_json::from_value(json!({ "metadata": { "name": "c" }, "spec": {}, "status": status })).unwrap()
    };
    assert!(matches!(claim_binding(&claim(json!({}))), Binding::Waiting(_)));
    assert_eq!(
        claim_binding(&claim(json!({ "sandbox": { "name": "pool-abcde" } }))),
        Binding::Bound("pool-abcde".into())
    );
    let failed = claim(
        json!({ "conditions": [{ "type": "Ready", "status": "False", "reason": "WarmPoolNotFound", "message": "no pool" }] }),
    );
    assert!(matches!(claim_binding(&failed), Binding::Failed(m) if m.contains("WarmPoolNotFound")));
}
