//! Core errors → JS errors.
//!
//! napi-rs 3 rejects async calls only with `napi::Error<Status>`, whose JS
//! `code` is a napi status name, not ours. So the core's code travels in the
//! reason as `[code] message`, and `js/errors.js` (`fromNative`) rethrows an
//! `Error` whose `message` is the core message and whose `code` is
//! `ErrorCode::as_str()` (`name` is `AbortError` for `aborted`). Every JS
//! entry point goes through that wrapper, so users never see the prefix.

use napi_derive::napi;
use sandbox_core::{Error, ErrorCode};

/// The napi error carrying a core error as `[code] message`.
pub fn to_napi(e: Error) -> napi::Error {
    napi::Error::new(napi::Status::GenericFailure, format!("[{}] {}", e.code.as_str(), e.message))
}

/// An `invalid_request` error for a bad argument from JS.
pub fn invalid(message: impl Into<String>) -> napi::Error {
    to_napi(Error::invalid_request(message))
}

/// Every error code the addon can reject with, in the core's order;
/// `js/errors.js` exports them as the `ErrorCode` object.
#[napi]
pub fn error_codes() -> Vec<&'static str> {
    ErrorCode::ALL.iter().map(|c| c.as_str()).collect()
}
