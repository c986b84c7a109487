//! Waiting on objects with watches (never sleeps): each watched object is a
//! stream of its latest state (from the provider's shared watches, see
//! `client::informer`), the streams are merged, and a step function decides
//! after every change whether the wait is over.

use std::time::Duration;

use futures::stream::{self, BoxStream};
use futures::StreamExt;
use tokio::time::Instant;

use crate::client::AUTH_GRACE;
use crate::error::{Error, ErrorCode, Result};

pub(crate) use crate::client::informer::Latest;

/// Merges tagged watch streams into one.
pub(crate) fn merge<U: Send + 'static>(streams: Vec<BoxStream<'static, Result<U>>>) -> BoxStream<'static, Result<U>> {
    stream::select_all(streams).boxed()
}

/// What a step function decides after a change.
pub(crate) enum Step<T> {
    /// The wait is over.
    Done(T),
    /// Keep waiting; the text says for what (reported in progress events and
    /// in the timeout message).
    Waiting(String),
    /// Give up now with this error (e.g. an image that cannot be pulled).
    Fail(Error),
}

/// Feeds every update to `step` (which records it and decides; `None` =
/// not enough observed yet) until it is done or fails, or `deadline` passes
/// (`timeout` error naming `what` and the last waiting reason).
/// Authorization errors before the first update end the wait at once, and
/// so does an unreachable API server; later transient API errors are
/// retried by the watcher until the deadline. A 403 or 401 after the watch
/// was already allowed is retried for [`AUTH_GRACE`]: an API server that
/// restarts answers them for a moment before its authorizer is ready. `updates` is borrowed so a
/// watch can go on serving a later wait (connect follows one claim watch
/// from binding to readiness).
pub(crate) async fn wait<U, T>(
    updates: &mut BoxStream<'static, Result<U>>,
    deadline: Instant,
    what: &str,
    mut step: impl FnMut(U) -> Option<Step<T>>,
    mut on_waiting: impl FnMut(&str),
) -> Result<T> {
    let started = Instant::now();
    let mut last_waiting = String::from("no state observed yet");
    let mut last_error: Option<Error> = None;
    let mut observed = false;
    // When the current run of authorization errors began.
    let mut denied_since: Option<Instant> = None;
    loop {
        let next = match tokio::time::timeout_at(deadline, updates.next()).await {
            Ok(Some(item)) => item,
            Ok(None) => return Err(Error::internal(format!("waiting for {what}: the watch ended unexpectedly"))),
            Err(_) => return Err(timeout(what, started.elapsed(), &last_waiting, last_error.as_ref())),
        };
        let denial = matches!(&next, Err(e) if matches!(e.code, ErrorCode::Forbidden | ErrorCode::Config));
        if !denial {
            denied_since = None;
        }
        match next {
            Err(e) if denial && observed && denied_since.get_or_insert_with(Instant::now).elapsed() < AUTH_GRACE => {
                last_error = Some(e)
            }
            Err(e) if denial || e.code == ErrorCode::InvalidRequest => return Err(e),
            // Nothing observed yet and the server unreachable: fail now, as a
            // GET would, so the caller can retry later instead of waiting out
            // the deadline.
            Err(e) if !observed && e.code == ErrorCode::Unavailable => return Err(e),
            Err(e) => last_error = Some(e),
            Ok(update) => {
                observed = true;
                last_error = None;
                match step(update) {
                    None => {}
                    Some(Step::Done(t)) => return Ok(t),
                    Some(Step::Fail(e)) => return Err(e),
                    Some(Step::Waiting(w)) if w != last_waiting => {
                        on_waiting(&w);
                        last_waiting = w;
                    }
                    Some(Step::Waiting(_)) => {}
                }
            }
        }
    }
}

fn timeout(what: &str, waited: Duration, waiting: &str, api: Option<&Error>) -> Error {
    let mut message = format!("timed out after {}s waiting for {what}: {waiting}", waited.as_secs());
    if let Some(e) = api {
        message.push_str(&format!(" (last API error: {})", e.message));
    }
    Error::new(ErrorCode::Timeout, message)
}

#[cfg(test)]
mod tests {
    //! `wait` on scripted streams under paused time.

    use super::*;

    fn forbidden() -> Error {
        Error::new(ErrorCode::Forbidden, "watch pods: forbidden")
    }

    /// Yields `items`, each `gap` after the previous one, then stays open.
    fn scripted(items: Vec<Result<u32>>, gap: Duration) -> BoxStream<'static, Result<u32>> {
        stream::iter(items)
            .then(move |item| async move {
                tokio::time::sleep(gap).await;
                item
            })
            .chain(stream::pending())
            .boxed()
    }

    async fn run(items: Vec<Result<u32>>, gap: Duration) -> Result<u32> {
        let deadline = Instant::now() + Duration::from_secs(120);
        let step = |n: u32| Some(if n == 2 { Step::Done(n) } else { Step::Waiting(format!("at {n}")) });
        wait(&mut scripted(items, gap), deadline, "the test", step, |_| {}).await
    }

    #[tokio::test(start_paused = true)]
    async fn a_403_before_anything_was_observed_ends_the_wait_at_once() {
        let started = Instant::now();
        let e = run(vec![Err(forbidden()), Ok(2)], Duration::from_millis(10)).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Forbidden);
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_403_while_the_server_restarts_is_retried() {
        // Allowed, then 403s for 10 s (the watcher's retries), then allowed again.
        let mut items = vec![Ok(1)];
        items.extend((0..10).map(|_| Err(forbidden())));
        items.push(Ok(2));
        assert_eq!(run(items, Duration::from_secs(1)).await.unwrap(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_403_that_persists_past_the_grace_is_forbidden_not_a_timeout() {
        let mut items = vec![Ok(1)];
        items.extend((0..60).map(|_| Err(forbidden())));
        let started = Instant::now();
        let e = run(items, Duration::from_secs(1)).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Forbidden, "{}", e.message);
        assert!(started.elapsed() <= AUTH_GRACE + Duration::from_secs(2), "{:?}", started.elapsed());
    }

    #[tokio::test(start_paused = true)]
    async fn an_update_between_denials_restarts_the_grace() {
        let mut items = vec![Ok(1)];
        for _ in 0..3 {
            items.extend((0..10).map(|_| Err(forbidden())));
            items.push(Ok(1));
        }
        items.push(Ok(2));
        assert_eq!(run(items, Duration::from_secs(1)).await.unwrap(), 2);
    }
}
