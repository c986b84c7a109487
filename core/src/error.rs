//! The one error type of the core. Every error carries a stable [`ErrorCode`]
//! that the JS layer exposes as `error.code`, and a message a user can act on.
//! Messages never contain credentials.

use std::fmt;
use std::sync::Arc;

/// Stable, machine-readable error categories (`error.code` in JS).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// A provider option is invalid or the kubeconfig cannot be used.
    Config,
    /// An argument to a call is invalid (bad env name, empty path, ...).
    InvalidRequest,
    /// The sandbox, file or object does not exist.
    NotFound,
    /// The object exists but is in a state that does not allow the call.
    InvalidState,
    /// The API server refused the call (RBAC); the message names verb and resource.
    Forbidden,
    /// A deadline passed (readiness, API call).
    Timeout,
    /// The API server or the node could not be reached, or answered 5xx/429.
    Unavailable,
    /// The sandbox cannot run: image pull failure, crash loop, terminal pod, expired.
    SandboxFailed,
    /// An exec connection ended without an exit status.
    ConnectionLost,
    /// The caller aborted the operation.
    Aborted,
    /// A limit was exceeded (file too large for `readFile`, ...).
    TooLarge,
    /// A path is a directory where a file was expected, or the reverse.
    IsDirectory,
    /// This image, runtime or cluster cannot do this: a tool missing in the
    /// image, no port-forward on this runtime, no Service for the sandbox.
    /// Distinct from `InvalidState`: retrying later does not help.
    Unsupported,
    /// Anything else; the message says what. Stays last (see `ALL`).
    Internal,
}

impl ErrorCode {
    /// Every code, in declaration order (the addon exports them as
    /// `ErrorCode`).
    pub const ALL: [ErrorCode; 14] = [
        ErrorCode::Config,
        ErrorCode::InvalidRequest,
        ErrorCode::NotFound,
        ErrorCode::InvalidState,
        ErrorCode::Forbidden,
        ErrorCode::Timeout,
        ErrorCode::Unavailable,
        ErrorCode::SandboxFailed,
        ErrorCode::ConnectionLost,
        ErrorCode::Aborted,
        ErrorCode::TooLarge,
        ErrorCode::IsDirectory,
        ErrorCode::Unsupported,
        ErrorCode::Internal,
    ];

    /// The snake_case name exposed to JS.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Config => "config",
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::NotFound => "not_found",
            ErrorCode::InvalidState => "invalid_state",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::Timeout => "timeout",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::SandboxFailed => "sandbox_failed",
            ErrorCode::ConnectionLost => "connection_lost",
            ErrorCode::Aborted => "aborted",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::IsDirectory => "is_directory",
            ErrorCode::Unsupported => "unsupported",
            ErrorCode::Internal => "internal",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error of the provider: a code plus a human message, and the error it
/// comes from where there is one (`std::error::Error::source`).
///
/// The binding passes on `code` and `message` only. A source is kept only
/// where the message already shows its text (a Kubernetes API answer, an
/// I/O or JSON error): causes left out of a message on purpose (credential
/// plugins, unparsable kubeconfigs, redacted transport errors) are not kept
/// either, so walking the chain shows nothing the message hides.
#[derive(Debug, Clone)]
pub struct Error {
    /// The stable category.
    pub code: ErrorCode,
    /// What went wrong and, where possible, how to fix it.
    pub message: String,
    /// The cause (see above); an `Arc` so the error stays `Clone`.
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// By hand rather than thiserror's `#[source]`, which would hand out the
/// `Arc` itself as the source, so `downcast_ref` to the cause's type fails.
impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl Error {
    /// An error with the given code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Error { code, message: message.into(), source: None }
    }
    /// This error, caused by `source` (whose text the message shows).
    pub(crate) fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }
    /// `ErrorCode::Config`.
    pub fn config(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Config, message)
    }
    /// `ErrorCode::InvalidRequest`.
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }
    /// `ErrorCode::Internal`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }
}

/// Result with the core's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// ` at line L, column C` for a parse error's position, or nothing.
pub(crate) fn position(line_column: Option<(u64, u64)>) -> String {
    line_column.map(|(line, column)| format!(" at line {line}, column {column}")).unwrap_or_default()
}

/// Longest run of non-whitespace a message shows in full.
const LONG_WORD: usize = 160;

/// `value` quoted as `{:?}` does, with a long middle left out, so a 4 KiB
/// path in a message does not push its reason out of sight.
pub(crate) fn quoted(value: &str) -> String {
    shorten(&format!("{value:?}"))
}

/// `text` with every run of more than 160 non-whitespace characters cut to
/// its first 80 and last 40 (the rest counted), for messages that echo user
/// paths or a tool's stderr.
pub(crate) fn shorten(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(4096));
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        let chars: Vec<char> = word.chars().collect();
        if chars.len() > LONG_WORD {
            out.extend(&chars[..80]);
            out.push_str(&format!("…({} more)…", chars.len() - 120));
            out.extend(&chars[chars.len() - 40..]);
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in text.chars() {
        if c.is_whitespace() {
            flush(&mut word, &mut out);
            out.push(c);
        } else {
            word.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_words_are_shortened_short_ones_kept() {
        assert_eq!(shorten("a b  c"), "a b  c");
        let long = "x".repeat(5000);
        let s = shorten(&format!("readFile /tmp/{long}: File name too long"));
        assert!(s.len() < 300 && s.ends_with(": File name too long"), "{s}");
        assert!(s.contains("(4886 more)"), "{s}");
        assert_eq!(quoted("a b"), "\"a b\"");
    }

    #[test]
    fn all_lists_every_code_once_in_order() {
        assert_eq!(ErrorCode::ALL.len(), ErrorCode::Internal as usize + 1);
        for (i, code) in ErrorCode::ALL.iter().enumerate() {
            assert_eq!(*code as usize, i, "{code}");
        }
    }
}
