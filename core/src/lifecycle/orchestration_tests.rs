//! The lifecycle's orchestration below the cluster: create's 409 paths and
//! connect's gone / rebound decisions, with the real kube client, informers
//! and waits against an API server in this process. kube-rs tests its client
//! the same way (`tower_test::mock::pair` as the client's service); here the
//! service is [`FakeApi`], which keeps objects and answers create, get, list,
//! watch and merge patch, so each test sets up the objects, lets the
//! lifecycle run, and changes them at a point the lifecycle has reached (a
//! request it made, an event it emitted), never after a sleep. Paused time:
//! a lifecycle that waits for something that never comes fails at its
//! deadline at once instead of hanging.

use std::collections::BTreeMap;
use std::convert::Infallible;

use bytes::Bytes;
use futures::channel::mpsc;
use futures::StreamExt;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::{json, Value};
use tokio::sync::mpsc as tokio_mpsc;

use super::resources::SandboxObject;
use super::*;
use crate::client::informer::Seen;

const NS: &str = "ns";
/// The exec engine the lifecycle marks as taking sandboxes over.
const ENGINE: &str = "0123456789abcdef";

type Body = UnsyncBoxBody<Bytes, Infallible>;
type Reaction = Box<dyn FnOnce(&FakeApi) + Send>;

#[derive(Default)]
struct State {
    resource_version: u64,
    /// By (plural, name).
    objects: BTreeMap<(String, String), Value>,
    /// Every event: resourceVersion, plural, the event line. A watch from a
    /// list's resourceVersion gets what happened since, as from the API server.
    history: Vec<(u64, String, Bytes)>,
    /// Open watches: plural and where their events go.
    watches: Vec<(String, mpsc::UnboundedSender<Bytes>)>,
    /// Every request, as `verb plural[/name]`.
    log: Vec<String>,
    /// What to do once a request (`verb plural[/name]`) has been answered.
    after: Vec<(String, Reaction)>,
    /// LISTs are never answered: a namespace so large that its list takes
    /// longer than anything a test waits for.
    hold_lists: bool,
    /// Events not sent to the watches yet (see [`FakeApi::lag`]).
    lagging: Vec<(String, Bytes)>,
    lag: bool,
}

/// An API server for one namespace, as far as the lifecycle uses it. Label
/// selectors are not applied: tests hold only objects every watch may see.
#[derive(Clone, Default)]
struct FakeApi(Arc<Mutex<State>>);

impl FakeApi {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        crate::sync::lock(&self.0)
    }

    fn client(&self) -> Client {
        let api = self.clone();
        Client::new(
            tower::service_fn(move |req: Request<kube::client::Body>| {
                let api = api.clone();
                async move { Ok::<_, Infallible>(api.serve(req).await) }
            }),
            NS,
        )
    }

    /// Creates or replaces an object (a new resourceVersion; if it has no
    /// uid, the replaced object's or a new one) and tells the watches of its
    /// kind.
    fn put(&self, plural: &str, mut object: Value) -> Value {
        let mut state = self.state();
        state.resource_version += 1;
        let meta = object["metadata"].as_object_mut().expect("metadata");
        meta.insert("resourceVersion".into(), state.resource_version.to_string().into());
        meta.insert("namespace".into(), NS.into());
        let name = meta["name"].as_str().expect("a name").to_owned();
        let key = (plural.to_owned(), name);
        if !meta.contains_key("uid") {
            let uid = match state.objects.get(&key) {
                Some(replaced) => replaced["metadata"]["uid"].clone(),
                None => format!("uid-{}-{}", key.1, state.resource_version).into(),
            };
            meta.insert("uid".into(), uid);
        }
        let kind = if state.objects.contains_key(&key) { "MODIFIED" } else { "ADDED" };
        state.objects.insert(key, object.clone());
        send(&mut state, plural, kind, &object);
        object
    }

    /// Deletes an object for good (its finalizers done) and tells the watches.
    fn remove(&self, plural: &str, name: &str) {
        let mut state = self.state();
        let object = state.objects.remove(&(plural.to_owned(), name.to_owned())).expect("an object to remove");
        state.resource_version += 1;
        send(&mut state, plural, "DELETED", &object);
    }

    /// While `on`, writes are answered and kept but their events wait, as
    /// when the API server's watch is behind; turning it off sends them.
    fn lag(&self, on: bool) {
        let mut state = self.state();
        state.lag = on;
        if !on {
            let held = std::mem::take(&mut state.lagging);
            for (plural, line) in held {
                state.watches.retain(|(p, tx)| *p != plural || tx.unbounded_send(line.clone()).is_ok());
            }
        }
    }

    fn get(&self, plural: &str, name: &str) -> Option<Value> {
        self.state().objects.get(&(plural.to_owned(), name.to_owned())).cloned()
    }

    /// Runs `action` right after the first request `verb plural[/name]`.
    fn after(&self, request: &str, action: impl FnOnce(&FakeApi) + Send + 'static) {
        self.state().after.push((request.to_owned(), Box::new(action)));
    }

    fn requests(&self, request: &str) -> usize {
        self.state().log.iter().filter(|r| *r == request).count()
    }

    async fn serve(&self, req: Request<kube::client::Body>) -> Response<Body> {
        let (parts, body) = req.into_parts();
        let body = body.collect().await.expect("a request body").to_bytes();
        let path = parts.uri.path();
        let query: Vec<&str> = parts.uri.query().unwrap_or_default().split('&').collect();
        let watch = query.contains(&"watch=true");
        let since = query.iter().find_map(|p| p.strip_prefix("resourceVersion=")).and_then(|v| v.parse().ok());
        // `/api/v1/namespaces/ns/pods/x`, `/apis/g/v/namespaces/ns/sandboxes`,
        // `/apis/authorization.k8s.io/v1/selfsubjectrulesreviews`.
        let rest = match path.split_once(&format!("/namespaces/{NS}/")) {
            Some((_, rest)) => rest,
            None => path.rsplit('/').next().unwrap_or_default(),
        };
        let (plural, name) = match rest.split_once('/') {
            Some((plural, name)) => (plural, Some(name)),
            None => (rest, None),
        };
        let verb = match (&parts.method, name, watch) {
            (&Method::GET, None, true) => "watch",
            (&Method::GET, None, false) => "list",
            (&Method::GET, Some(_), _) => "get",
            (&Method::POST, None, _) => "create",
            (&Method::PATCH, Some(_), _) => "patch",
            (method, _, _) => panic!("unexpected request {method} {path}"),
        };
        let request = match name {
            Some(name) => format!("{verb} {plural}/{name}"),
            None => format!("{verb} {plural}"),
        };
        let hold = {
            let mut state = self.state();
            state.log.push(request.clone());
            verb == "list" && state.hold_lists
        };
        if hold {
            std::future::pending::<()>().await;
        }
        let response = self.answer(verb, plural, name, &body, since.unwrap_or(0));
        let action = {
            let mut state = self.state();
            let due = state.after.iter().position(|(r, _)| *r == request);
            due.map(|i| state.after.remove(i).1)
        };
        if let Some(action) = action {
            action(self);
        }
        response
    }

    fn answer(&self, verb: &str, plural: &str, name: Option<&str>, body: &[u8], since: u64) -> Response<Body> {
        match (verb, plural, name) {
            ("create", "selfsubjectrulesreviews", _) => json_response(
                StatusCode::CREATED,
                &json!({
                    "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": {},
                    "status": {
                        "resourceRules": [{ "verbs": ["*"], "apiGroups": ["*"], "resources": ["*"] }],
                        "nonResourceRules": [], "incomplete": false,
                    },
                }),
            ),
            ("create", _, _) => {
                let object: Value = serde_json::from_slice(body).expect("a JSON object");
                let name = object["metadata"]["name"].as_str().expect("a name").to_owned();
                if self.get(plural, &name).is_some() {
                    return status(StatusCode::CONFLICT, "AlreadyExists", &format!("{plural} {name:?} already exists"));
                }
                json_response(StatusCode::CREATED, &self.put(plural, object))
            }
            ("get", _, Some(name)) => match self.get(plural, name) {
                Some(object) => json_response(StatusCode::OK, &object),
                None => status(StatusCode::NOT_FOUND, "NotFound", &format!("{plural} {name:?} not found")),
            },
            ("patch", _, Some(name)) => match self.get(plural, name) {
                Some(mut object) => {
                    merge(&mut object, &serde_json::from_slice(body).expect("a JSON merge patch"));
                    json_response(StatusCode::OK, &self.put(plural, object))
                }
                None => status(StatusCode::NOT_FOUND, "NotFound", &format!("{plural} {name:?} not found")),
            },
            ("list", _, _) => {
                let state = self.state();
                let items: Vec<&Value> =
                    state.objects.iter().filter(|((p, _), _)| p == plural).map(|(_, o)| o).collect();
                json_response(
                    StatusCode::OK,
                    &json!({
                        "apiVersion": "v1", "kind": "List",
                        "metadata": { "resourceVersion": state.resource_version.to_string() },
                        "items": items,
                    }),
                )
            }
            ("watch", _, _) => {
                let (tx, rx) = mpsc::unbounded();
                let mut state = self.state();
                for (_, _, line) in state.history.iter().filter(|(rv, p, _)| *rv > since && p == plural) {
                    tx.unbounded_send(line.clone()).expect("the receiver is here");
                }
                state.watches.push((plural.to_owned(), tx));
                let frames = rx.map(|line| Ok::<_, Infallible>(Frame::data(line)));
                Response::new(BodyExt::boxed_unsync(StreamBody::new(frames)))
            }
            _ => panic!("unexpected {verb} {plural}"),
        }
    }
}

/// One watch event line to every watch of `plural`.
fn send(state: &mut State, plural: &str, kind: &str, object: &Value) {
    let mut line = serde_json::to_vec(&json!({ "type": kind, "object": object })).expect("JSON");
    line.push(b'\n');
    let line = Bytes::from(line);
    state.history.push((state.resource_version, plural.to_owned(), line.clone()));
    if state.lag {
        state.lagging.push((plural.to_owned(), line));
        return;
    }
    state.watches.retain(|(p, tx)| p != plural || tx.unbounded_send(line.clone()).is_ok());
}

fn json_response(code: StatusCode, value: &Value) -> Response<Body> {
    let body = Full::new(Bytes::from(serde_json::to_vec(value).expect("JSON")));
    let mut response = Response::new(BodyExt::boxed_unsync(body));
    *response.status_mut() = code;
    response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    response
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    json_response(
        code,
        &json!({ "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                 "reason": reason, "message": message, "code": code.as_u16() }),
    )
}

/// JSON merge patch (RFC 7386).
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    target.remove(key);
                } else {
                    merge(target.entry(key.clone()).or_insert(Value::Null), value);
                }
            }
        }
        (target, patch) => *target = patch.clone(),
    }
}

/// A provider's lifecycle over `api` (`options` as the provider takes them),
/// and the kinds of the events it emits, in order.
fn lifecycle(api: &FakeApi, options: Value) -> (Lifecycle, tokio_mpsc::UnboundedReceiver<EventKind>) {
    let mut options = options;
    options["namespace"] = NS.into();
    options["kubeConfig"] = json!({ "server": "https://127.0.0.1:1", "token": "t" });
    let config = crate::config::parse(&options).expect("valid options");
    let conn = Connection {
        client: api.client(),
        default_namespace: NS.into(),
        transport_warning: None,
        requests: Default::default(),
    };
    let (tx, rx) = tokio_mpsc::unbounded_channel();
    let sink: EventSink = Arc::new(move |e| {
        let _ = tx.send(e.kind);
    });
    (Lifecycle::new(&conn, Arc::new(config), Some(sink), &CancellationToken::new()).with_swept_by(ENGINE), rx)
}

fn direct() -> Value {
    json!({ "sandbox": { "image": "busybox" }, "suspend": "none" })
}

/// Direct mode with a volume, so suspend deletes the pod.
fn suspending() -> Value {
    json!({ "sandbox": { "image": "busybox", "volume": { "size": "1Gi" } } })
}

/// A Sandbox or claim of `actor` (our labels and annotation).
fn ours(api_version: &str, kind: &str, name: &str, actor: &str, rest: Value) -> Value {
    let annotations = BTreeMap::from([(names::ACTOR_ANNOTATION, actor)]);
    let mut object = json!({
        "apiVersion": api_version, "kind": kind,
        "metadata": { "name": name, "generation": 1, "labels": names::labels(actor), "annotations": annotations },
        "spec": {},
    });
    merge(&mut object, &rest);
    object
}

fn sandbox(name: &str, actor: &str, rest: Value) -> Value {
    ours("agents.x-k8s.io/v1beta1", "Sandbox", name, actor, rest)
}

/// A Sandbox whose controller reports it ready, and its running pod.
fn ready_sandbox_and_pod(api: &FakeApi, name: &str, actor: &str) {
    api.put(
        "sandboxes",
        sandbox(
            name,
            actor,
            json!({ "spec": { "operatingMode": "Running" }, "status": { "conditions": [{
                "type": "Ready", "status": "True", "reason": "DependenciesReady", "message": "",
                "observedGeneration": 1 }] } }),
        ),
    );
    api.put("pods", running_pod(name));
}

/// The controller's adoption of Sandbox `sandbox` by claim `claim`: its
/// controller reference, to the claim's UID.
fn adopt(api: &FakeApi, sandbox: &str, claim: &str) {
    let uid = api.get("sandboxclaims", claim).expect("the claim")["metadata"]["uid"].clone();
    set_controller(api, sandbox, "SandboxClaim", claim, uid);
}

/// Makes the `kind` (an extensions.agents.x-k8s.io kind) named `name`, of
/// UID `uid`, Sandbox `sandbox`'s controller.
fn set_controller(api: &FakeApi, sandbox: &str, kind: &str, name: &str, uid: Value) {
    let mut object = api.get("sandboxes", sandbox).expect("the Sandbox");
    object["metadata"]["ownerReferences"] = json!([{ "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": kind, "name": name, "uid": uid, "controller": true }]);
    api.put("sandboxes", object);
}

/// A pod the node runs.
fn running_pod(name: &str) -> Value {
    json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": name },
            "spec": { "nodeName": "node", "containers": [{ "name": "main" }] },
            "status": { "phase": "Running" } })
}

/// Starts the shared watches (direct mode) and waits until they hold the
/// Sandbox and pod `name`: a provider that served calls before.
async fn until_cached(lifecycle: &Lifecycle, name: &str) {
    lifecycle.caches.start(false);
    let mut pods = lifecycle.caches.pods.subscribe(name);
    while pods.now().is_none() {
        pods.changed().await;
    }
    let mut sandboxes = lifecycle.caches.sandboxes.subscribe(name);
    while sandboxes.now().is_none() {
        sandboxes.changed().await;
    }
}

fn deleting() -> Value {
    json!({ "metadata": { "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["f"] } })
}

/// The next event that is not a progress report (`waiting`, `scheduled`).
async fn next_event(events: &mut tokio_mpsc::UnboundedReceiver<EventKind>) -> EventKind {
    loop {
        match events.recv().await.expect("an event") {
            EventKind::Waiting | EventKind::Scheduled => {}
            kind => return kind,
        }
    }
}

#[tokio::test(start_paused = true)]
async fn create_meeting_its_own_live_object_returns_its_id() {
    // A retry of a create whose answer was lost: the object is the actor's.
    let api = FakeApi::default();
    let (lifecycle, _) = lifecycle(&api, direct());
    let name = names::object_name(false, "a");
    api.put("sandboxes", sandbox(&name, "a", json!({})));
    assert_eq!(lifecycle.create("a").await.unwrap(), format!("{NS}/{name}"));
    assert_eq!(api.requests("create sandboxes"), 1);
    assert_eq!(api.requests(&format!("get sandboxes/{name}")), 1, "the 409 was looked into");
}

#[tokio::test(start_paused = true)]
async fn create_refuses_an_object_of_another_actor() {
    let api = FakeApi::default();
    let (lifecycle, _) = lifecycle(&api, direct());
    let name = names::object_name(false, "a");
    api.put("sandboxes", sandbox(&name, "b", json!({})));
    let err = lifecycle.create("a").await.unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidState, "{err}");
    assert!(err.message.contains("not created for this actor"), "{err}");
    assert_eq!(api.requests("create sandboxes"), 1);
    assert!(names::owned_by(
        &serde_json::from_value::<SandboxObject>(api.get("sandboxes", &name).unwrap()).unwrap().metadata,
        "b"
    ));
}

#[tokio::test(start_paused = true)]
async fn create_waits_out_its_object_being_deleted_then_creates_it_anew() {
    let api = FakeApi::default();
    let (lifecycle, mut events) = lifecycle(&api, direct());
    let name = names::object_name(false, "a");
    let old = api.put("sandboxes", sandbox(&name, "a", deleting()));
    // The finalizer finishes right after create has read the object.
    let gone = name.clone();
    api.after(&format!("get sandboxes/{name}"), move |api| api.remove("sandboxes", &gone));
    assert_eq!(lifecycle.create("a").await.unwrap(), format!("{NS}/{name}"));
    assert_eq!(api.requests("create sandboxes"), 2, "created again once the old one was gone");
    let new = api.get("sandboxes", &name).expect("the new Sandbox");
    assert_ne!(new["metadata"]["uid"], old["metadata"]["uid"]);
    assert!(new["metadata"].get("deletionTimestamp").is_none());
    assert_eq!(next_event(&mut events).await, EventKind::ColdStart);
}

#[tokio::test(start_paused = true)]
async fn connect_to_a_sandbox_deleted_while_it_starts_is_none() {
    // Direct mode: the Sandbox is the id; once it is gone there is nothing
    // to connect to (None: Rivet then creates another), not an error.
    let api = FakeApi::default();
    let (lifecycle, mut events) = lifecycle(&api, direct());
    let name = names::object_name(false, "a");
    api.put("sandboxes", sandbox(&name, "a", json!({ "spec": { "operatingMode": "Running" } })));
    let id = format!("{NS}/{name}");
    let connect = tokio::spawn(async move { lifecycle.connect("a", &id).await });
    assert_eq!(events.recv().await, Some(EventKind::Waiting), "waiting for the pod");
    api.remove("sandboxes", &name);
    assert_eq!(connect.await.unwrap().unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn connect_follows_a_claim_rebound_to_another_sandbox() {
    // Warm-pool mode: the claim's Sandbox is deleted and the controller binds
    // the claim to a new one; connect follows the claim, not the old name.
    let api = FakeApi::default();
    let (lifecycle, mut events) = lifecycle(&api, json!({ "warmPool": "pool" }));
    let claim = names::object_name(true, "a");
    let bound_to = |sandbox: &str| {
        ours(
            "extensions.agents.x-k8s.io/v1beta1",
            "SandboxClaim",
            &claim,
            "a",
            json!({ "status": { "sandbox": { "name": sandbox } } }),
        )
    };
    api.put("sandboxclaims", bound_to("old"));
    api.put("sandboxes", sandbox("old", "a", json!({ "spec": { "operatingMode": "Running" } })));
    adopt(&api, "old", &claim);
    let id = format!("{NS}/{claim}");
    let connect = tokio::spawn(async move { lifecycle.connect("a", &id).await });
    assert_eq!(events.recv().await, Some(EventKind::Waiting), "waiting for old's pod");
    ready_sandbox_and_pod(&api, "new", "a");
    adopt(&api, "new", &claim);
    api.put("sandboxclaims", bound_to("new"));
    api.remove("sandboxes", "old");
    let connected = connect.await.unwrap().unwrap().expect("connected");
    assert_eq!((connected.target.pod.as_str(), connected.target.container.as_deref()), ("new", Some("main")));
    assert!(!connected.fresh, "created by another process");
    assert_eq!(next_event(&mut events).await, EventKind::Ready);
}

#[tokio::test(start_paused = true)]
async fn connect_to_a_claim_deleted_while_it_waits_is_none() {
    let api = FakeApi::default();
    let (lifecycle, mut events) = lifecycle(&api, json!({ "warmPool": "pool" }));
    let claim = names::object_name(true, "a");
    api.put(
        "sandboxclaims",
        ours("extensions.agents.x-k8s.io/v1beta1", "SandboxClaim", &claim, "a", json!({ "status": {} })),
    );
    let id = format!("{NS}/{claim}");
    let connect = tokio::spawn(async move { lifecycle.connect("a", &id).await });
    assert_eq!(events.recv().await, Some(EventKind::Waiting), "waiting for the claim to be bound");
    api.remove("sandboxclaims", &claim);
    assert_eq!(connect.await.unwrap().unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn a_cold_connect_among_a_thousand_objects_reads_by_get_while_the_lists_run() {
    // A new provider (a worker restarted, or one more worker) connects to a
    // Ready sandbox in a namespace of 1,000 others: it reads the claim,
    // Sandbox and pod by GET and does not wait for its watches' first
    // LISTs, which here never end. Were connect to wait for them, paused
    // time would run to readyTimeoutMs and the connect would fail.
    for warm_pool in [false, true] {
        let api = FakeApi::default();
        for i in 0..1000 {
            let other = format!("other-{i}");
            api.put("sandboxes", sandbox(&other, &other, json!({ "spec": { "operatingMode": "Running" } })));
        }
        let name = names::object_name(false, "a");
        ready_sandbox_and_pod(&api, &name, "a");
        let (options, id) = if warm_pool {
            let claim = names::object_name(true, "a");
            api.put(
                "sandboxclaims",
                ours(
                    "extensions.agents.x-k8s.io/v1beta1",
                    "SandboxClaim",
                    &claim,
                    "a",
                    json!({ "status": { "sandbox": { "name": name } } }),
                ),
            );
            adopt(&api, &name, &claim);
            (json!({ "warmPool": "pool" }), format!("{NS}/{claim}"))
        } else {
            (direct(), format!("{NS}/{name}"))
        };
        api.state().hold_lists = true;
        let (lifecycle, _) = lifecycle(&api, options);
        let connected = lifecycle.connect("a", &id).await.unwrap().expect("connected");
        assert_eq!(connected.target.pod, name, "warm pool: {warm_pool}");
        assert_eq!(api.requests(&format!("get sandboxes/{name}")), 1, "warm pool: {warm_pool}");
        assert_eq!(api.requests(&format!("get pods/{name}")), 1, "warm pool: {warm_pool}");
        let log = api.state().log.clone();
        assert!(log.iter().any(|r| r == "list sandboxes"), "the watches started: {log:?}");
        assert!(log.iter().all(|r| !r.starts_with("watch ")), "no list ended, so no watch began: {log:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_connect_that_resumes_its_sandbox_reports_the_pod_new() {
    // The pod a resume brings up was made after this call's patch: no exec
    // ran in it, so the provider skips the orphan sweep (an exec as costly
    // as the rest of the connect). A reconnect to it afterwards sweeps.
    let api = FakeApi::default();
    let (lifecycle, mut events) = lifecycle(&api, suspending());
    let name = names::object_name(false, "a");
    api.put(
        "sandboxes",
        sandbox(
            &name,
            "a",
            json!({ "spec": { "operatingMode": "Suspended" }, "status": { "conditions": [{
                "type": "Suspended", "status": "True", "reason": "Suspended", "message": "",
                "observedGeneration": 1 }] } }),
        ),
    );
    let resumed = name.clone();
    api.after(&format!("patch sandboxes/{name}"), move |api| {
        // The controller reports the patched Sandbox ready (its metadata as
        // the patch left it) and its new pod running.
        let mut sb = api.get("sandboxes", &resumed).unwrap();
        ready_sandbox_and_pod(api, &resumed, "a");
        sb["status"] = api.get("sandboxes", &resumed).unwrap()["status"].clone();
        api.put("sandboxes", sb);
    });
    until_cached(&lifecycle, &name).await;
    let id = format!("{NS}/{name}");
    let connected = lifecycle.connect("a", &id).await.unwrap().expect("connected");
    assert!(connected.fresh, "resumed by this call: nothing to sweep");
    assert_eq!(connected.swept_by.as_deref(), Some(ENGINE), "the resume marked it this engine's");
    assert_eq!(api.requests(&format!("get pods/{name}")), 0, "the suspended sandbox's missing pod is not asked for");
    assert_eq!(next_event(&mut events).await, EventKind::Resumed);
    let again = lifecycle.connect("a", &id).await.unwrap().expect("connected");
    assert!(!again.fresh, "a reconnect sweeps");
}

#[tokio::test(start_paused = true)]
async fn a_created_sandbox_is_this_engines_and_a_mark_makes_another_so() {
    // Direct mode: the Sandbox create makes carries the mark (its pod will be
    // new); a Sandbox another process took over is marked after the sweep.
    let api = FakeApi::default();
    let (lifecycle, _) = lifecycle(&api, direct());
    let made = api.clone();
    let id = lifecycle.create("a").await.unwrap();
    let name = id.split('/').nth(1).unwrap().to_owned();
    assert_eq!(made.get("sandboxes", &name).unwrap()["metadata"]["annotations"][names::SWEPT_BY_ANNOTATION], ENGINE);
    let mut other = made.get("sandboxes", &name).unwrap();
    other["metadata"]["annotations"][names::SWEPT_BY_ANNOTATION] = "another".into();
    api.put("sandboxes", other);
    lifecycle.mark_swept(&id).await.unwrap();
    assert_eq!(api.get("sandboxes", &name).unwrap()["metadata"]["annotations"][names::SWEPT_BY_ANNOTATION], ENGINE);
}

/// Warm pool `pool` (of template `t`) and a claim on it made by `lifecycle`'s
/// create for actor `a`: the sandbox id and the claim's name.
async fn claim_from_pool(api: &FakeApi, lifecycle: &Lifecycle) -> (String, String) {
    api.put(
        "sandboxwarmpools",
        json!({ "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxWarmPool",
                "metadata": { "name": "pool" }, "spec": { "sandboxTemplateRef": { "name": "t" } } }),
    );
    api.put(
        "sandboxtemplates",
        json!({ "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxTemplate",
                "metadata": { "name": "t" },
                "spec": { "podTemplate": { "spec": { "containers": [{ "name": "main", "image": "busybox" }] } } } }),
    );
    let id = lifecycle.create("a").await.unwrap();
    let claim = id.split('/').nth(1).unwrap().to_owned();
    (id, claim)
}

#[tokio::test(start_paused = true)]
async fn a_claimed_member_counts_once_its_adoption_is_seen() {
    // The controller adopts a pool member (the claim becomes its controller,
    // its generation moves on), then names it in the claim's status. The
    // claim's watch can show the name before the Sandboxes' watch shows the
    // adoption: the member, still the pool's there, is Ready for its old
    // generation. Connect must wait for the adoption and for Ready at the new
    // generation, not return on the pool's Ready.
    let api = FakeApi::default();
    let (lifecycle, mut events) = lifecycle(&api, json!({ "warmPool": "pool", "suspend": "none" }));
    let (id, claim) = claim_from_pool(&api, &lifecycle).await;
    while events.try_recv().is_ok() {} // create's
    ready_sandbox_and_pod(&api, "pool-x1", "a");
    set_controller(&api, "pool-x1", "SandboxWarmPool", "pool", "uid-pool".into());
    let mut bound = api.get("sandboxclaims", &claim).unwrap();
    bound["status"] = json!({ "sandbox": { "name": "pool-x1" } });
    api.put("sandboxclaims", bound);
    let connect = tokio::spawn({
        let id = id.clone();
        async move { lifecycle.connect("a", &id).await }
    });
    assert_eq!(events.recv().await, Some(EventKind::Waiting), "the pool's member is not the claim's yet");
    // The adoption arrives; Ready is still the old generation's.
    adopt(&api, "pool-x1", &claim);
    let mut adopted = api.get("sandboxes", "pool-x1").unwrap();
    adopted["metadata"]["generation"] = 2.into();
    api.put("sandboxes", adopted);
    assert_eq!(events.recv().await, Some(EventKind::Adopted));
    assert_eq!(events.recv().await, Some(EventKind::Scheduled));
    assert_eq!(events.recv().await, Some(EventKind::Waiting), "Ready is generation 1's");
    assert!(!connect.is_finished());
    let mut ready = api.get("sandboxes", "pool-x1").unwrap();
    ready["status"]["conditions"][0]["observedGeneration"] = 2.into();
    api.put("sandboxes", ready);
    let connected = connect.await.unwrap().unwrap().expect("connected");
    assert_eq!(connected.target.pod, "pool-x1");
    assert_eq!(next_event(&mut events).await, EventKind::Ready);
}

#[tokio::test(start_paused = true)]
async fn in_warm_pool_mode_the_claim_carries_the_mark() {
    // The claim is the provider's own object; its Sandbox is the pool's until
    // claimed. Create marks the claim, a connect reads the mark there, and a
    // mark after another process's sweep patches the claim: a warm
    // create+connect makes no request on the Sandbox.
    let api = FakeApi::default();
    let (lifecycle, _) = lifecycle(&api, json!({ "warmPool": "pool", "suspend": "none" }));
    let (id, claim) = claim_from_pool(&api, &lifecycle).await;
    let mark_of = |api: &FakeApi| {
        api.get("sandboxclaims", &claim).unwrap()["metadata"]["annotations"][names::SWEPT_BY_ANNOTATION].clone()
    };
    assert_eq!(mark_of(&api), ENGINE, "create marked the claim");
    // The controller hands it a warm member.
    ready_sandbox_and_pod(&api, "pool-x1", "a");
    adopt(&api, "pool-x1", &claim);
    let mut bound = api.get("sandboxclaims", &claim).unwrap();
    bound["status"] = json!({ "sandbox": { "name": "pool-x1" } });
    api.put("sandboxclaims", bound);
    let connected = lifecycle.connect("a", &id).await.unwrap().expect("connected");
    assert!(connected.fresh, "claimed by this call's create: nothing to sweep");
    assert_eq!(connected.swept_by.as_deref(), Some(ENGINE), "the claim's mark");
    // Another process took it over: its mark is on the claim.
    let mut other = api.get("sandboxclaims", &claim).unwrap();
    other["metadata"]["annotations"][names::SWEPT_BY_ANNOTATION] = "another".into();
    api.put("sandboxclaims", other);
    let mut claims = lifecycle.caches.claims.subscribe(&claim);
    while !matches!(claims.now(), Some(Seen::Present(c)) if c.metadata.annotations.as_ref().and_then(|a| a.get(names::SWEPT_BY_ANNOTATION)).is_some_and(|m| m == "another"))
    {
        claims.changed().await;
    }
    let again = lifecycle.connect("a", &id).await.unwrap().expect("connected");
    assert!(!again.fresh);
    assert_eq!(again.swept_by.as_deref(), Some("another"), "read from the claim, not the Sandbox");
    lifecycle.mark_swept(&id).await.unwrap();
    assert_eq!(mark_of(&api), ENGINE, "marked on the claim");
    assert_eq!(api.requests("patch sandboxes/pool-x1"), 0, "the pool's Sandbox is not written");
}

#[tokio::test(start_paused = true)]
async fn a_reconnect_sees_a_suspend_its_watch_has_not_shown_yet() {
    // Another process (or an operator) suspends a Ready sandbox and this
    // process connects at once, before the shared watch has delivered the
    // suspend. The connect must wait for it and resume, not hand out the pod
    // the suspend is taking away.
    let api = FakeApi::default();
    let (lifecycle, mut events) = lifecycle(&api, suspending());
    let name = names::object_name(false, "a");
    ready_sandbox_and_pod(&api, &name, "a");
    let old_pod = api.get("pods", &name).unwrap()["metadata"]["uid"].clone();
    until_cached(&lifecycle, &name).await;
    // The suspend, written but not yet watched.
    api.lag(true);
    let mut suspending = api.get("sandboxes", &name).unwrap();
    suspending["spec"]["operatingMode"] = "Suspended".into();
    suspending["metadata"]["generation"] = 2.into();
    api.put("sandboxes", suspending);
    let controller = name.clone();
    api.after(&format!("get sandboxes/{name}"), move |api| {
        // The controller deletes the pod and reports the Sandbox suspended;
        // then the watch catches up.
        api.remove("pods", &controller);
        let mut sb = api.get("sandboxes", &controller).unwrap();
        sb["status"] = json!({ "conditions": [{ "type": "Suspended", "status": "True", "reason": "Suspended",
                                                "message": "", "observedGeneration": 2 }] });
        api.put("sandboxes", sb);
        api.lag(false);
    });
    let resumed = name.clone();
    api.after(&format!("patch sandboxes/{name}"), move |api| {
        let mut sb = api.get("sandboxes", &resumed).unwrap();
        sb["status"] = json!({ "conditions": [{ "type": "Ready", "status": "True", "reason": "DependenciesReady",
                                                "message": "", "observedGeneration": 3 }] });
        sb["metadata"]["generation"] = 3.into();
        api.put("sandboxes", sb);
        api.put("pods", running_pod(&resumed));
    });
    let id = format!("{NS}/{name}");
    let connected = lifecycle.connect("a", &id).await.unwrap().expect("connected");
    assert_eq!(api.requests(&format!("patch sandboxes/{name}")), 1, "resumed");
    assert!(connected.fresh, "a new pod");
    assert_ne!(connected.pod_uid.as_deref(), old_pod.as_str(), "not the pod the suspend took away");
    assert_eq!(next_event(&mut events).await, EventKind::Resumed);
}
