//! Decoding the channel-3 `metav1.Status` that ends an exec.
//!
//! The exit status comes only from this frame: a connection that ends without
//! one is never reported as exit 0 (see `websocket`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;

/// How a process ended, according to the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    /// The process exited with this code (`Success` → 0).
    Exited(i32),
    /// The server reported a failure without an exit code (for example the
    /// runtime could not start the process); the status message says why.
    Failed(String),
    /// The consumer ended the session (see [`super::Release`]) before the
    /// server sent a status: it learned how the command ended from its
    /// output (the wrapper's trailer).
    Released,
}

/// `Success` → `Exited(0)`; `NonZeroExitCode` with an `ExitCode` cause →
/// `Exited(n)`; anything else → `Failed(message)`.
pub(crate) fn decode(status: &Status) -> Completion {
    if status.status.as_deref() == Some("Success") {
        return Completion::Exited(0);
    }
    if status.reason.as_deref() == Some("NonZeroExitCode") {
        let code = status
            .details
            .as_ref()
            .and_then(|d| d.causes.as_ref())
            .and_then(|causes| causes.iter().find(|c| c.reason.as_deref() == Some("ExitCode")))
            .and_then(|c| c.message.as_deref()?.trim().parse().ok());
        if let Some(code) = code {
            return Completion::Exited(code);
        }
    }
    let message = status.message.clone().filter(|m| !m.is_empty()).unwrap_or_else(|| {
        format!(
            "status {:?}, reason {:?}, no exit code",
            status.status.as_deref().unwrap_or(""),
            status.reason.as_deref().unwrap_or("")
        )
    });
    Completion::Failed(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(json: &str) -> Status {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn success_is_zero() {
        assert_eq!(decode(&status(r#"{"status":"Success","metadata":{}}"#)), Completion::Exited(0));
    }

    #[test]
    fn non_zero_exit_code() {
        let s = status(
            r#"{"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 7], exit code 7","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"7"}]},"metadata":{}}"#,
        );
        assert_eq!(decode(&s), Completion::Exited(7));
    }

    #[test]
    fn exit_code_cause_need_not_be_first() {
        let s = status(
            r#"{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"Other","message":"x"},{"reason":"ExitCode","message":"127"}]}}"#,
        );
        assert_eq!(decode(&s), Completion::Exited(127));
    }

    #[test]
    fn failure_without_exit_code_is_an_error() {
        let s = status(
            r#"{"status":"Failure","message":"OCI runtime exec failed: executable file not found","reason":"InternalError","code":500}"#,
        );
        assert_eq!(decode(&s), Completion::Failed("OCI runtime exec failed: executable file not found".into()));
        let s = status(
            r#"{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"x"}]}}"#,
        );
        assert!(matches!(decode(&s), Completion::Failed(m) if m.contains("NonZeroExitCode")));
        let s = status(r#"{}"#);
        assert!(matches!(decode(&s), Completion::Failed(_)));
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn exit_codes_round_trip(code in 1..=255i32, pad in "[ ]{0,2}") {
            let json = format!(
                r#"{{"status":"Failure","reason":"NonZeroExitCode","details":{{"causes":[{{"reason":"ExitCode","message":"{pad}{code}{pad}"}}]}}}}"#
            );
            let status: Status = serde_json::from_str(&json).unwrap();
            prop_assert_eq!(decode(&status), Completion::Exited(code));
        }

        #[test]
        fn a_failure_without_an_exit_code_is_never_an_exit(message in ".{0,80}", reason in "[A-Za-z]{0,20}") {
            prop_assume!(reason != "NonZeroExitCode");
            let status = Status {
                status: Some("Failure".into()),
                reason: Some(reason),
                message: Some(message),
                ..Default::default()
            };
            prop_assert!(matches!(decode(&status), Completion::Failed(_)));
        }
    }
}
