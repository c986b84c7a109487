//! One watch per kind and namespace, shared by every waiter of a provider.
//!
//! A provider serves every actor of a Rivet worker; if each wait opened its
//! own LIST+WATCH (as kube-runtime's `watch_object` does), the API server's
//! watch count, connection count and LIST load would grow with the number
//! of sandboxes. An [`Informer`] instead keeps one `watcher` per kind and
//! namespace (started on first use, stopped when idle or when its owner
//! cancels), a compact cache of the objects, and a `tokio::sync::watch` slot
//! per object someone waits on. It never blocks on its subscribers: a slot
//! keeps only the latest state, which is all a waiter decides on.
//!
//! Not kube's shared reflector (`reflect_shared`): it drops Delete events
//! (kube-rs/kube#1590), back-pressures the watch on its slowest subscriber
//! and fans every event out to every subscriber.
//!
//! # Fresh data only
//! A waiter sees a state only while the informer is [`Health::Live`]: synced
//! by a completed list and without an error since. Any error makes it
//! [`Health::Degraded`] (the error reaches every waiter, so their fail-fast
//! rules hold), drops the watch and lists again after a backoff: kube's
//! watcher hides a successful re-watch, so recovery must show as a list's
//! end. The cache is not served meanwhile, so no waiter completes on a state
//! from before an outage. "Gone" is a Delete event, absence from a completed
//! list confirmed by a GET (a list can predate a create that a waiter knows
//! of), or a GET 404. A waiter for the object this provider just created
//! (its UID known) takes no absence from a list and makes no GET: the watch
//! shows the create, or after a grace the waiter watches the object alone.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{self, BoxStream};
use futures::{FutureExt, StreamExt, TryStreamExt};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, watcher, DefaultBackoff, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{api_error, Action};
use crate::error::{Error, Result};

/// How long an informer nobody uses keeps its watch.
pub(crate) const IDLE_STOP: Duration = Duration::from_secs(300);
/// How often a running informer checks whether it is idle.
const IDLE_CHECK: Duration = Duration::from_secs(5);
/// How long a waiter trusts a GET that found an object the live cache lacks
/// before it concludes the watch cannot see it (a label selector the object
/// does not match) and watches that object on its own.
const MISMATCH_GRACE: Duration = Duration::from_secs(2);
/// The shortest time between two attempts of a failed watch, however often
/// new waiters ask for one.
const MIN_RETRY: Duration = Duration::from_secs(1);

/// The latest state of one object: `Some` while it exists, `None` once it
/// is absent (never created, or deleted).
pub(crate) type Latest<K> = Option<K>;

/// Where an informer's events and point reads come from: the API server
/// ([`ApiSource`]), or a script in tests.
pub trait Source<K>: Send + Sync + 'static {
    /// A new watch: `Init`, the listed objects, `InitDone`, then changes.
    /// Errors are the core's (see `watch_error`).
    fn events(&self) -> BoxStream<'static, Result<Event<K>>>;
    /// GET of one object; 404 → `None`.
    fn get(&self, name: &str) -> BoxFuture<'static, Result<Option<K>>>;
    /// A watch of one object, for a waiter whose object the shared watch
    /// cannot see.
    fn watch_one(&self, name: &str) -> BoxStream<'static, Result<Latest<K>>>;
}

/// A [`Source`] on the API server: kube-runtime's `watcher` with `config`
/// (a label selector where a stable one exists; consistent lists, bookmarks),
/// each object passed through `slim` before it is cached.
pub struct ApiSource<K> {
    api: Api<K>,
    config: watcher::Config,
    resource: &'static str,
    namespace: String,
    slim: fn(&mut K),
}

impl<K> ApiSource<K> {
    /// `api` is namespaced to `namespace`; `resource` names the kind in
    /// errors (`pods`, `sandboxes.agents.x-k8s.io`).
    pub fn new(
        api: Api<K>,
        namespace: &str,
        config: watcher::Config,
        resource: &'static str,
        slim: fn(&mut K),
    ) -> Self {
        ApiSource { api, config, resource, namespace: namespace.to_owned(), slim }
    }
}

impl<K> Source<K> for ApiSource<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    fn events(&self) -> BoxStream<'static, Result<Event<K>>> {
        let (resource, namespace) = (self.resource, self.namespace.clone());
        watcher(self.api.clone(), self.config.clone())
            .modify(self.slim)
            .map_err(move |e| watch_error(e, resource, None, &namespace))
            .boxed()
    }

    fn get(&self, name: &str) -> BoxFuture<'static, Result<Option<K>>> {
        let (api, resource, namespace, name, slim) =
            (self.api.clone(), self.resource, self.namespace.clone(), name.to_owned(), self.slim);
        async move {
            let action = Action { verb: "get", resource, name: Some(&name), namespace: &namespace };
            match api.get(&name).await {
                Ok(mut o) => {
                    slim(&mut o);
                    Ok(Some(o))
                }
                Err(e) => match api_error(e, action) {
                    e if e.code == crate::error::ErrorCode::NotFound => Ok(None),
                    e => Err(e),
                },
            }
        }
        .boxed()
    }

    fn watch_one(&self, name: &str) -> BoxStream<'static, Result<Latest<K>>> {
        let (resource, namespace, owned) = (self.resource, self.namespace.clone(), name.to_owned());
        watcher::watch_object(self.api.clone(), name)
            .default_backoff()
            .map_err(move |e| watch_error(e, resource, Some(&owned), &namespace))
            .boxed()
    }
}

/// A watch error as the core's error, naming the verb that failed.
pub(crate) fn watch_error(e: watcher::Error, resource: &'static str, name: Option<&str>, namespace: &str) -> Error {
    let action = Action { verb: "watch", resource, name, namespace };
    match e {
        watcher::Error::InitialListFailed(k) => api_error(k, Action { verb: "list", ..action }),
        watcher::Error::WatchStartFailed(k) | watcher::Error::WatchFailed(k) => api_error(k, action),
        watcher::Error::WatchError(status) => api_error(kube::Error::Api(status), action),
        watcher::Error::NoResourceVersion => Error::internal(format!("watch {resource}: no resourceVersion")),
    }
}

/// Whether an informer's cache may be believed.
#[derive(Debug, Clone)]
pub enum Health {
    /// Not started, or listing for the first time.
    Syncing,
    /// Synced by a completed list, no error since.
    Live,
    /// The watch failed; it lists again after a backoff.
    Degraded(Error),
}

/// What the informer knows of one object.
#[derive(Debug)]
enum Slot<K> {
    /// Not seen yet by the current watch.
    Unknown,
    Present(Arc<K>),
    /// A Delete event for the object of this UID.
    Deleted(Option<String>),
    /// Absent from a completed list (the list may predate a recent create).
    Unlisted,
}

// Not derived: `K` itself need not be `Clone` for the slot to be.
impl<K> Clone for Slot<K> {
    fn clone(&self) -> Self {
        match self {
            Slot::Unknown => Slot::Unknown,
            Slot::Present(o) => Slot::Present(o.clone()),
            Slot::Deleted(uid) => Slot::Deleted(uid.clone()),
            Slot::Unlisted => Slot::Unlisted,
        }
    }
}

/// One kind in one namespace, shared (cheap to clone).
pub struct Informer<K> {
    shared: Arc<Shared<K>>,
}

impl<K> Clone for Informer<K> {
    fn clone(&self) -> Self {
        Informer { shared: self.shared.clone() }
    }
}

struct Shared<K> {
    source: Box<dyn Source<K>>,
    state: Mutex<State<K>>,
    health: watch::Sender<Health>,
    /// A waiter arrived while the watch is failing: try again now instead of
    /// after the backoff (at most every [`MIN_RETRY`]), so it learns whether
    /// the failure still holds rather than an error from before it came (a
    /// permission given back meanwhile, say).
    retry: tokio::sync::Notify,
    /// Ends the watch task for good (the owner is gone).
    stop: CancellationToken,
}

struct State<K> {
    /// The cache: every object of the kind (and selector) in the namespace.
    store: HashMap<String, Arc<K>>,
    /// The names listed so far while a list is in progress.
    listing: Option<HashSet<String>>,
    /// Slots of the names someone waits on.
    slots: HashMap<String, watch::Sender<Slot<K>>>,
    /// A watch task runs.
    running: bool,
    /// Mirrors `Health::Live`, for point reads under this lock.
    live: bool,
    /// Last subscribe or cache read.
    last_used: Instant,
    /// Lists started (diagnostics and tests).
    lists: u64,
}

impl<K> Informer<K>
where
    K: Resource + Clone + Debug + Send + Sync + 'static,
{
    /// An informer over `source`; its watch starts on first use and ends for
    /// good when `stop` is cancelled.
    pub fn new(source: impl Source<K>, stop: CancellationToken) -> Self {
        let state = State {
            store: HashMap::new(),
            listing: None,
            slots: HashMap::new(),
            running: false,
            live: false,
            last_used: Instant::now(),
            lists: 0,
        };
        Informer {
            shared: Arc::new(Shared {
                source: Box::new(source),
                state: Mutex::new(state),
                health: watch::channel(Health::Syncing).0,
                retry: tokio::sync::Notify::new(),
                stop,
            }),
        }
    }

    /// Starts the watch if it is not running (e.g. ahead of a wait, so its
    /// list runs in parallel with the call's own requests).
    pub fn start(&self) {
        drop(self.shared.used());
    }

    /// The object as the live cache holds it; `None` on a miss (not live, or
    /// not cached), where the caller asks the API server.
    pub fn cached(&self, name: &str) -> Option<Arc<K>> {
        let state = self.shared.used();
        state.live.then(|| state.store.get(name).cloned()).flatten()
    }

    /// The object from the live cache, else by GET (404 → `None`): a read
    /// that costs no request while the watch is live, and is never older
    /// than a GET otherwise.
    pub async fn read(&self, name: &str) -> Result<Option<K>> {
        match self.cached(name) {
            Some(o) => Ok(Some((*o).clone())),
            None => self.get(name).await,
        }
    }

    /// The object from the live cache, where a miss means it is not there
    /// (or not yet: the watch will show it); by GET while the cache is not
    /// live. For a read whose miss only sends the caller to a wait on this
    /// watch, so a miss needs no GET to confirm it.
    pub async fn peek(&self, name: &str) -> Result<Option<K>> {
        let live = {
            let state = self.shared.used();
            state.live.then(|| state.store.get(name).map(|o| (**o).clone()))
        };
        match live {
            Some(found) => Ok(found),
            None => self.get(name).await,
        }
    }

    /// The object by GET (404 → `None`), whatever the cache holds: for a
    /// verdict that must not wait for the watch to catch up.
    pub async fn get(&self, name: &str) -> Result<Option<K>> {
        self.shared.source.get(name).await
    }

    /// The object's states, fresh only (see the module doc), and the watch's
    /// errors: the same stream a per-object watch yields, from the shared
    /// watch. `uid`: only that object counts (one this provider just
    /// created, while the cache may still hold the deleted one of the same
    /// name); others of the name look absent.
    pub fn watch_named(&self, name: &str, uid: Option<String>) -> BoxStream<'static, Result<Latest<K>>> {
        self.waiter(name, uid, true)
    }

    /// As [`Informer::watch_named`], for a waiter to which absence is no
    /// verdict (a pod not created yet, while readiness waits for one): an
    /// absence from a list is yielded as it is, without the GET that would
    /// confirm it.
    pub fn watch_transient(&self, name: &str) -> BoxStream<'static, Result<Latest<K>>> {
        self.waiter(name, None, false)
    }

    fn waiter(&self, name: &str, uid: Option<String>, confirm: bool) -> BoxStream<'static, Result<Latest<K>>> {
        let failing = matches!(*self.shared.health.borrow(), Health::Degraded(_));
        if failing {
            self.shared.retry.notify_one();
        }
        let waiter = Waiter {
            slot: self.shared.subscribe(name),
            health: self.shared.health.subscribe(),
            shared: self.shared.clone(),
            name: name.to_owned(),
            uid,
            confirm,
            confirmed: None,
            fallback: None,
            // An error from before the waiter came is not news: the retry's is.
            news: !failing,
            pending: true,
        };
        stream::unfold(waiter, |mut w| async move { w.next().await.map(|item| (item, w)) }).boxed()
    }

    /// A subscription to the object's fresh states, for callers that keep
    /// their own verdict (exec's pod liveness).
    pub fn subscribe(&self, name: &str) -> Subscription<K> {
        Subscription { slot: self.shared.subscribe(name), health: self.shared.health.subscribe() }
    }

    /// Whether the cache may be believed now.
    pub fn health(&self) -> Health {
        self.shared.health.borrow().clone()
    }

    /// Whether a watch is open, and how many lists it has started (for
    /// diagnostics and tests).
    pub fn activity(&self) -> (bool, u64) {
        let state = self.shared.lock();
        (state.running, state.lists)
    }
}

impl<K> Shared<K>
where
    K: Resource + Clone + Debug + Send + Sync + 'static,
{
    /// The state (map updates only under the lock: `crate::sync`).
    fn lock(&self) -> MutexGuard<'_, State<K>> {
        crate::sync::lock(&self.state)
    }

    /// Marks a use, starting the watch task if none runs (under the lock, so
    /// a task deciding to stop and a new use never miss each other).
    fn used(self: &Arc<Self>) -> MutexGuard<'_, State<K>> {
        let mut state = self.lock();
        state.last_used = Instant::now();
        if !state.running && !self.stop.is_cancelled() {
            state.running = true;
            tokio::spawn(run(self.clone()));
        }
        state
    }

    /// The slot of `name`, created from the cache if nobody waits on it yet.
    fn subscribe(self: &Arc<Self>, name: &str) -> watch::Receiver<Slot<K>> {
        let mut state = self.used();
        if let Some(slot) = state.slots.get(name) {
            return slot.subscribe();
        }
        let initial = match state.store.get(name) {
            Some(o) => Slot::Present(o.clone()),
            None if state.live => Slot::Unlisted,
            None => Slot::Unknown,
        };
        let (slot, rx) = watch::channel(initial);
        state.slots.insert(name.to_owned(), slot);
        rx
    }

    /// Applies one event to the cache and the slots.
    fn apply(&self, event: Event<K>, backoff: &mut DefaultBackoff) {
        let mut state = self.lock();
        match event {
            Event::Init => {
                state.listing = Some(HashSet::new());
                state.lists += 1;
            }
            Event::InitApply(o) => {
                let name = o.name_any();
                if let Some(listed) = state.listing.as_mut() {
                    listed.insert(name.clone());
                }
                state.put(name, o);
            }
            Event::InitDone => {
                let listed = state.listing.take().unwrap_or_default();
                let state = &mut *state;
                state.store.retain(|name, _| listed.contains(name));
                for (name, slot) in &state.slots {
                    if !listed.contains(name) {
                        slot.send_if_modified(|s| {
                            let stale = matches!(s, Slot::Present(_) | Slot::Unknown);
                            if stale {
                                *s = Slot::Unlisted;
                            }
                            stale
                        });
                    }
                }
                state.live = true;
                backoff.reset();
                self.health.send_replace(Health::Live);
            }
            Event::Apply(o) => state.put(o.name_any(), o),
            Event::Delete(o) => {
                let (name, uid) = (o.name_any(), o.uid());
                // A Delete only removes the object it names: a later one of
                // the same name may already be cached.
                if state.store.get(&name).is_some_and(|cached| cached.uid() == uid) {
                    state.store.remove(&name);
                }
                if let Some(slot) = state.slots.get(&name) {
                    slot.send_if_modified(|s| match s {
                        Slot::Present(cached) if cached.uid() != uid => false,
                        _ => {
                            *s = Slot::Deleted(uid);
                            true
                        }
                    });
                }
            }
        }
    }

    /// The watch failed: stop serving the cache and tell every waiter.
    fn degrade(&self, e: Error) {
        let mut state = self.lock();
        state.live = false;
        state.listing = None;
        drop(state);
        self.health.send_replace(Health::Degraded(e));
    }

    /// Stops the task if nobody used the informer for [`IDLE_STOP`]; `true`
    /// if it did. Slots nobody holds are dropped on the way.
    fn retire_if_idle(&self) -> bool {
        let mut state = self.lock();
        state.slots.retain(|_, slot| slot.receiver_count() > 0);
        let idle = state.slots.is_empty() && state.last_used.elapsed() >= IDLE_STOP;
        if idle {
            state.retire();
            drop(state);
            self.health.send_replace(Health::Syncing);
        }
        idle
    }

    /// The task ends (owner gone): forget everything.
    fn retire(&self) {
        self.lock().retire();
        self.health.send_replace(Health::Syncing);
    }
}

impl<K: Resource> State<K> {
    fn put(&mut self, name: String, o: K) {
        let o = Arc::new(o);
        if let Some(slot) = self.slots.get(&name) {
            slot.send_replace(Slot::Present(o.clone()));
        }
        self.store.insert(name, o);
    }

    fn retire(&mut self) {
        self.running = false;
        self.live = false;
        self.listing = None;
        self.store.clear();
        for slot in self.slots.values() {
            slot.send_replace(Slot::Unknown);
        }
    }
}

/// The watch task of one informer: applies events, lists again after an
/// error (after a backoff), and ends when idle or when the owner cancels.
async fn run<K>(shared: Arc<Shared<K>>)
where
    K: Resource + Clone + Debug + Send + Sync + 'static,
{
    let mut backoff = DefaultBackoff::default();
    let mut idle = tokio::time::interval_at(Instant::now() + IDLE_CHECK, IDLE_CHECK);
    loop {
        let mut events = shared.source.events();
        loop {
            tokio::select! {
                () = shared.stop.cancelled() => return shared.retire(),
                _ = idle.tick() => if shared.retire_if_idle() { return },
                event = events.next() => match event {
                    Some(Ok(event)) => shared.apply(event, &mut backoff),
                    Some(Err(e)) => {
                        shared.degrade(e);
                        break;
                    }
                    // kube's watcher never ends; should a source end, list again.
                    None => break,
                },
            }
        }
        drop(events);
        let failed_at = Instant::now();
        let mut wake = failed_at + backoff.next().unwrap_or(Duration::from_secs(30));
        loop {
            tokio::select! {
                () = shared.stop.cancelled() => return shared.retire(),
                _ = idle.tick() => if shared.retire_if_idle() { return },
                () = tokio::time::sleep_until(wake) => break,
                () = shared.retry.notified() => wake = wake.min(failed_at + MIN_RETRY),
            }
        }
    }
}

/// One waiter's view of one object (see [`Informer::watch_named`]).
struct Waiter<K> {
    shared: Arc<Shared<K>>,
    name: String,
    slot: watch::Receiver<Slot<K>>,
    health: watch::Receiver<Health>,
    /// Only the object of this UID counts.
    uid: Option<String>,
    /// An absence from a list is confirmed by a GET before it is yielded.
    confirm: bool,
    /// The object exists but the live cache lacks it (a GET found it, or
    /// this provider created it): until when the cache may catch up before
    /// the waiter watches the object on its own.
    confirmed: Option<Instant>,
    /// The object's own watch, once the shared one proved blind to it.
    fallback: Option<BoxStream<'static, Result<Latest<K>>>>,
    /// The health changed since the waiter last looked (the first look is news).
    news: bool,
    /// The slot changed since the waiter last judged it (or was never judged).
    pending: bool,
}

impl<K> Waiter<K>
where
    K: Resource + Clone + Debug + Send + Sync + 'static,
{
    /// The next item of the stream. Cancel safe at every `.await` except
    /// the confirming GET, whose loss only repeats it.
    async fn next(&mut self) -> Option<Result<Latest<K>>> {
        loop {
            if let Some(own) = self.fallback.as_mut() {
                return own.next().await;
            }
            let news = std::mem::take(&mut self.news) | self.health.has_changed().unwrap_or(false);
            if self.slot.has_changed().unwrap_or(false) {
                self.slot.mark_unchanged();
                self.pending = true;
            }
            let health = self.health.borrow_and_update().clone();
            match health {
                // Every error is news: the wait's grace for 403s counts them.
                Health::Degraded(e) if news => return Some(Err(e)),
                Health::Live if self.pending => {
                    self.pending = false;
                    let slot = self.slot.borrow().clone();
                    if let Some(item) = self.judge(slot).await {
                        return Some(item);
                    }
                    continue;
                }
                _ => {}
            }
            let grace = self.confirmed;
            tokio::select! {
                changed = self.health.changed() => match changed {
                    Ok(()) => self.news = true,
                    Err(_) => return None,
                },
                changed = self.slot.changed() => match changed {
                    Ok(()) => self.pending = true,
                    Err(_) => return None,
                },
                () = sleep_until_opt(grace) => {
                    self.confirmed = None;
                    crate::trace!("watch {:?}: the shared watch does not see it; watching it alone", self.name);
                    self.fallback = Some(self.shared.source.watch_one(&self.name));
                }
            }
        }
    }

    /// What the waiter yields for a fresh slot state, if anything.
    async fn judge(&mut self, slot: Slot<K>) -> Option<Result<Latest<K>>> {
        let uid = self.uid.clone();
        let ours = move |o: &K| uid.as_deref().is_none_or(|uid| o.uid().as_deref() == Some(uid));
        match slot {
            Slot::Present(o) if ours(&o) => {
                self.confirmed = None;
                Some(Ok(Some((*o).clone())))
            }
            // Another object of the name: ours is not there (yet).
            Slot::Present(_) | Slot::Unknown => None,
            Slot::Deleted(uid) if self.uid.is_some() && uid != self.uid => None,
            Slot::Deleted(_) => Some(Ok(None)),
            Slot::Unlisted if !self.confirm => Some(Ok(None)),
            // The object this provider just created: the list predates the
            // create, and the watch, which goes on from the list, will show
            // it; no GET. Should it not within the grace (a selector the
            // object does not match), the waiter watches it alone.
            Slot::Unlisted if self.uid.is_some() => {
                self.confirmed.get_or_insert(Instant::now() + MISMATCH_GRACE);
                None
            }
            // The list may predate a create this waiter knows of: ask.
            Slot::Unlisted => match self.shared.source.get(&self.name).await {
                Ok(Some(o)) if ours(&o) => {
                    self.confirmed = Some(Instant::now() + MISMATCH_GRACE);
                    Some(Ok(Some(o)))
                }
                Ok(_) if self.uid.is_some() => None,
                Ok(_) => Some(Ok(None)),
                Err(e) => Some(Err(e)),
            },
        }
    }
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A subscription to one object's fresh states (see [`Informer::subscribe`]).
pub struct Subscription<K> {
    slot: watch::Receiver<Slot<K>>,
    health: watch::Receiver<Health>,
}

/// One fresh observation of a subscribed object.
pub enum Seen<K> {
    /// The object as last listed or changed.
    Present(Arc<K>),
    /// Deleted (a Delete event, or absent from a completed list).
    Absent,
}

impl<K> Subscription<K> {
    /// The object's state if the cache is live and has seen the name; what
    /// [`Subscription::changed`] waits to change next.
    pub fn now(&mut self) -> Option<Seen<K>> {
        let live = matches!(*self.health.borrow_and_update(), Health::Live);
        let slot = self.slot.borrow_and_update();
        if !live {
            return None;
        }
        match &*slot {
            Slot::Present(o) => Some(Seen::Present(o.clone())),
            Slot::Deleted(_) | Slot::Unlisted => Some(Seen::Absent),
            Slot::Unknown => None,
        }
    }

    /// Waits until the object or the informer's health changes; pends
    /// forever once the informer is gone. Cancel safe.
    pub async fn changed(&mut self) {
        let gone = tokio::select! {
            r = self.health.changed() => r.is_err(),
            r = self.slot.changed() => r.is_err(),
        };
        if gone {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    //! The informer on a scripted [`Source`] (named so: a fake of the API
    //! server's watch, for the orders of events a real one rarely shows on
    //! demand), under paused time.

    use std::sync::atomic::{AtomicUsize, Ordering};

    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use tokio::sync::mpsc;

    use super::*;
    use crate::error::ErrorCode;

    type Events = mpsc::UnboundedSender<Result<Event<Pod>>>;
    type Scripted = mpsc::UnboundedReceiver<Result<Event<Pod>>>;

    /// Each `events()` call takes the next scripted watch; GETs answer from
    /// `objects`.
    #[derive(Default, Clone)]
    struct Script {
        watches: Arc<Mutex<Vec<Scripted>>>,
        objects: Arc<Mutex<HashMap<String, Pod>>>,
        gets: Arc<AtomicUsize>,
        own_watches: Arc<AtomicUsize>,
    }

    impl Script {
        /// Queues a watch; returns its sender (events for it).
        fn watch(&self) -> Events {
            let (tx, rx) = mpsc::unbounded_channel();
            crate::sync::lock(&self.watches).push(rx);
            tx
        }
    }

    impl Source<Pod> for Script {
        fn events(&self) -> BoxStream<'static, Result<Event<Pod>>> {
            let mut watches = crate::sync::lock(&self.watches);
            if watches.is_empty() {
                return stream::pending().boxed();
            }
            let rx = watches.remove(0);
            stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) }).boxed()
        }
        fn get(&self, name: &str) -> BoxFuture<'static, Result<Option<Pod>>> {
            self.gets.fetch_add(1, Ordering::SeqCst);
            let found = crate::sync::lock(&self.objects).get(name).cloned();
            async move { Ok(found) }.boxed()
        }
        fn watch_one(&self, _name: &str) -> BoxStream<'static, Result<Latest<Pod>>> {
            self.own_watches.fetch_add(1, Ordering::SeqCst);
            stream::pending().boxed()
        }
    }

    fn pod(name: &str, uid: &str, rv: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(uid.into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn pod_named(name: &str) -> Pod {
        pod(name, "u", "7")
    }

    fn list(tx: &Events, pods: &[Pod]) {
        tx.send(Ok(Event::Init)).unwrap();
        for p in pods {
            tx.send(Ok(Event::InitApply(p.clone()))).unwrap();
        }
        tx.send(Ok(Event::InitDone)).unwrap();
    }

    fn rv(item: Option<Result<Latest<Pod>>>) -> Option<String> {
        item.expect("an item").expect("no error").map(|p| p.metadata.resource_version.unwrap())
    }

    /// The next item, if one comes within a minute of paused time.
    async fn next<T>(s: &mut BoxStream<'static, T>) -> Option<T> {
        tokio::time::timeout(Duration::from_secs(60), s.next()).await.ok().flatten()
    }

    fn unavailable() -> Error {
        Error::new(ErrorCode::Unavailable, "watch pods: connection refused")
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_see_listed_and_changed_states_from_one_watch() {
        let script = Script::default();
        let tx = script.watch();
        let informer = Informer::new(script.clone(), CancellationToken::new());
        let mut a = informer.watch_named("a", None);
        let mut b = informer.watch_named("b", None);
        list(&tx, &[pod("a", "u1", "1"), pod("b", "u2", "2")]);
        assert_eq!(rv(next(&mut a).await).as_deref(), Some("1"));
        assert_eq!(rv(next(&mut b).await).as_deref(), Some("2"));
        tx.send(Ok(Event::Apply(pod("a", "u1", "3")))).unwrap();
        assert_eq!(rv(next(&mut a).await).as_deref(), Some("3"));
        tx.send(Ok(Event::Delete(pod("a", "u1", "4")))).unwrap();
        assert_eq!(rv(next(&mut a).await), None, "deleted");
        assert_eq!(informer.activity(), (true, 1), "one watch, one list for both waiters");
        assert_eq!(informer.cached("b").unwrap().metadata.resource_version.as_deref(), Some("2"));
        assert!(informer.cached("a").is_none());
        assert_eq!(script.gets.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_served_before_the_first_list_completes() {
        let script = Script::default();
        let tx = script.watch();
        let informer = Informer::new(script.clone(), CancellationToken::new());
        let mut a = informer.watch_named("a", None);
        tx.send(Ok(Event::Init)).unwrap();
        tx.send(Ok(Event::InitApply(pod("a", "u1", "1")))).unwrap();
        assert!(next(&mut a).await.is_none(), "a list in progress is not served");
        assert!(informer.cached("a").is_none());
        tx.send(Ok(Event::InitDone)).unwrap();
        assert_eq!(rv(next(&mut a).await).as_deref(), Some("1"));
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_reaches_every_waiter_and_the_cache_is_not_served_until_a_new_list_ends() {
        let script = Script::default();
        let first = script.watch();
        let second = script.watch();
        let informer = Informer::new(script.clone(), CancellationToken::new());
        let mut a = informer.watch_named("a", None);
        list(&first, &[pod("a", "u1", "1")]);
        assert_eq!(rv(next(&mut a).await).as_deref(), Some("1"));
        first.send(Err(unavailable())).unwrap();
        let e = next(&mut a).await.unwrap().unwrap_err();
        assert_eq!(e.code, ErrorCode::Unavailable);
        assert!(informer.cached("a").is_none(), "a degraded cache is not read");
        // A waiter that starts now sees nothing stale either (nor the old
        // error: it waits for the new attempt).
        let mut late = informer.watch_named("a", None);
        assert!(next(&mut late).await.is_none());
        // After the backoff the informer lists again, on a new watch.
        second.send(Ok(Event::Init)).unwrap();
        second.send(Ok(Event::InitApply(pod("a", "u1", "5")))).unwrap();
        assert!(next(&mut a).await.is_none(), "nothing until the list ends");
        second.send(Ok(Event::InitDone)).unwrap();
        assert_eq!(rv(next(&mut a).await).as_deref(), Some("5"));
        assert_eq!(rv(next(&mut late).await).as_deref(), Some("5"));
        assert_eq!(informer.activity().1, 2, "one list for the recovery, whatever the number of waiters");
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_before_the_first_list_reaches_the_waiter_at_once() {
        let script = Script::default();
        let tx = script.watch();
        let informer = Informer::new(script, CancellationToken::new());
        let mut a = informer.watch_named("a", None);
        tx.send(Ok(Event::Init)).unwrap();
        tx.send(Err(Error::new(ErrorCode::Forbidden, "list pods: forbidden"))).unwrap();
        assert_eq!(next(&mut a).await.unwrap().unwrap_err().code, ErrorCode::Forbidden);
        assert!(matches!(informer.health(), Health::Degraded(_)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_arriving_while_the_watch_fails_gets_a_new_attempt_not_an_old_error() {
        let script = Script::default();
        let failing: Vec<Events> = (0..5).map(|_| script.watch()).collect();
        let working = script.watch();
        for tx in &failing {
            tx.send(Err(Error::new(ErrorCode::Forbidden, "list pods: forbidden"))).unwrap();
        }
        let informer = Informer::new(script.clone(), CancellationToken::new());
        informer.start();
        // Five failures in a row: the backoff is now about 13 s.
        while informer.activity().1 < 5 && !failing[4].is_closed() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::task::yield_now().await;
        assert!(matches!(informer.health(), Health::Degraded(_)));
        list(&working, &[pod("a", "u1", "1")]);
        let started = Instant::now();
        let mut a = informer.watch_named("a", None);
        assert_eq!(rv(next(&mut a).await).as_deref(), Some("1"), "the permission is back: no stale 403");
        assert!(started.elapsed() <= MIN_RETRY, "retried at once, not after the backoff: {:?}", started.elapsed());
    }

    #[tokio::test(start_paused = true)]
    async fn absence_from_a_list_is_confirmed_by_a_get() {
        let script = Script::default();
        let first = script.watch();
        let second = script.watch();
        let informer = Informer::new(script.clone(), CancellationToken::new());
        let mut gone = informer.watch_named("gone", None);
        let mut created = informer.watch_named("created", None);
        list(&first, &[pod("gone", "u1", "1")]);
        assert_eq!(rv(next(&mut gone).await).as_deref(), Some("1"));
        // "created" was made after the list's snapshot: the GET finds it.
        crate::sync::lock(&script.objects).insert("created".into(), pod("created", "u2", "2"));
        assert_eq!(rv(next(&mut created).await).as_deref(), Some("2"));
        // "gone" was deleted during an outage: absent from the next list.
        first.send(Err(unavailable())).unwrap();
        assert!(next(&mut gone).await.unwrap().is_err());
        list(&second, &[]);
        assert_eq!(rv(next(&mut gone).await), None, "absent from the list and the GET");
        // The cache never saw "created" (a selector it does not match): its
        // waiter watches it alone after the grace.
        assert!(next(&mut created).await.is_none());
        assert_eq!(script.own_watches.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_transient_waiter_takes_absence_from_a_list_as_it_is() {
        let script = Script::default();
        let tx = script.watch();
        let informer = Informer::new(script.clone(), CancellationToken::new());
        let mut pod = informer.watch_transient("not-yet");
        list(&tx, &[]);
        assert_eq!(rv(next(&mut pod).await), None);
        assert_eq!(script.gets.load(Ordering::SeqCst), 0, "no confirming GET");
        tx.send(Ok(Event::Apply(pod_named("not-yet")))).unwrap();
        assert_eq!(rv(next(&mut pod).await).as_deref(), Some("7"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_for_a_new_object_ignores_the_deleted_one_of_the_same_name() {
        let script = Script::default();
        let tx = script.watch();
        let informer = Informer::new(script.clone(), CancellationToken::new());
        let mut old = informer.watch_named("a", None);
        let mut old_deleting = pod("a", "old", "1");
        old_deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()));
        list(&tx, &[old_deleting]);
        assert!(rv(next(&mut old).await).is_some());
        let mut new = informer.watch_named("a", Some("new".into()));
        tx.send(Ok(Event::Delete(pod("a", "old", "2")))).unwrap();
        assert_eq!(rv(next(&mut old).await), None);
        assert!(next(&mut new).await.is_none(), "neither the old object nor its deletion is ours");
        tx.send(Ok(Event::Apply(pod("a", "new", "3")))).unwrap();
        assert_eq!(rv(next(&mut new).await).as_deref(), Some("3"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_for_what_this_provider_created_waits_for_the_watch_without_a_get() {
        let script = Script::default();
        let tx = script.watch();
        let informer = Informer::new(script.clone(), CancellationToken::new());
        let mut made = informer.watch_named("made", Some("u1".into()));
        let mut lost = informer.watch_named("lost", Some("u2".into()));
        // Both were created after the list's snapshot (a GET would find them).
        crate::sync::lock(&script.objects).insert("made".into(), pod("made", "u1", "2"));
        crate::sync::lock(&script.objects).insert("lost".into(), pod("lost", "u2", "3"));
        list(&tx, &[]);
        let early = tokio::time::timeout(MISMATCH_GRACE / 2, made.next()).await;
        assert!(early.is_err(), "absent from the list is no verdict for it, and it waits for the watch");
        tx.send(Ok(Event::Apply(pod("made", "u1", "2")))).unwrap();
        assert_eq!(rv(next(&mut made).await).as_deref(), Some("2"));
        assert_eq!(script.gets.load(Ordering::SeqCst), 0, "no GET");
        // The watch never shows "lost" (a selector it does not match): its
        // waiter watches it alone after the grace.
        assert!(next(&mut lost).await.is_none());
        assert_eq!(script.own_watches.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unused_informer_stops_and_the_next_use_lists_again() {
        let script = Script::default();
        let first = script.watch();
        let _second = script.watch();
        let informer = Informer::new(script.clone(), CancellationToken::new());
        let mut a = informer.watch_named("a", None);
        list(&first, &[pod("a", "u1", "1")]);
        assert!(next(&mut a).await.is_some());
        drop(a);
        tokio::time::sleep(IDLE_STOP - Duration::from_secs(10)).await;
        assert_eq!(informer.activity(), (true, 1), "still in use recently");
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert_eq!(informer.activity(), (false, 1), "idle: stopped");
        assert!(first.is_closed(), "its watch was dropped");
        assert!(informer.cached("a").is_none());
        tokio::task::yield_now().await;
        assert!(informer.activity().0, "a use starts it again");
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_subscription_keeps_the_watch_open() {
        let script = Script::default();
        let tx = script.watch();
        let informer = Informer::new(script.clone(), CancellationToken::new());
        let _held = informer.subscribe("a");
        list(&tx, &[]);
        tokio::time::sleep(IDLE_STOP * 2).await;
        assert!(informer.activity().0);
        assert!(!tx.is_closed());
    }

    #[tokio::test(start_paused = true)]
    async fn cancelling_the_owner_ends_the_watch_task() {
        let script = Script::default();
        let tx = script.watch();
        let stop = CancellationToken::new();
        let informer = Informer::new(script.clone(), stop.clone());
        let _held = informer.subscribe("a");
        list(&tx, &[]);
        tokio::task::yield_now().await;
        stop.cancel();
        tx.closed().await;
        assert!(!informer.activity().0);
        informer.start();
        assert!(!informer.activity().0, "no task starts once the owner is gone");
    }

    #[tokio::test(start_paused = true)]
    async fn a_subscription_sees_deletion_and_replacement() {
        let script = Script::default();
        let tx = script.watch();
        let informer = Informer::new(script.clone(), CancellationToken::new());
        let mut sub = informer.subscribe("a");
        assert!(sub.now().is_none(), "nothing known before the list");
        list(&tx, &[pod("a", "u1", "1")]);
        sub.changed().await;
        assert!(matches!(sub.now(), Some(Seen::Present(p)) if p.metadata.uid.as_deref() == Some("u1")));
        tx.send(Ok(Event::Delete(pod("a", "u1", "2")))).unwrap();
        sub.changed().await;
        assert!(matches!(sub.now(), Some(Seen::Absent)));
    }
}
