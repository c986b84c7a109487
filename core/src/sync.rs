//! The crate's one policy for a poisoned `std::sync::Mutex`, and the binding's:
//! every lock goes through [`lock`], which uses a poisoned mutex on.
//!
//! Why that is sound here: every critical section is a few map, set, counter
//! or `Option` updates, with nothing between them that can panic half way,
//! so the guarded state is consistent whenever a guard is dropped, even by a
//! panic. A panic elsewhere in the thread (a bug) stays that thread's: it
//! must not turn every later call of every sandbox into a panic too (what
//! `lock().unwrap()` would do), nor silently skip the bookkeeping (what
//! `if let Ok(..) = lock()` would do). Nothing holds a std lock across an
//! `.await` (clippy's `await_holding_lock` is denied); async locks are
//! Tokio's, which do not poison.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, using it on if a panic poisoned it (see the module docs).
pub fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
