//! Reading a JSON options object field by field so every error names the
//! option (`sandbox.resources.cpu`) and unknown options are rejected.

use std::collections::{BTreeMap, BTreeSet};

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// A JSON object being read; tracks which keys were consumed.
pub(crate) struct Fields<'a> {
    path: String,
    map: &'a Map<String, Value>,
    seen: BTreeSet<&'static str>,
}

impl<'a> Fields<'a> {
    /// Reads `value` as the object named `path` ("" for the top level).
    pub(crate) fn new(path: &str, value: &'a Value) -> Result<Self> {
        match value {
            Value::Object(map) => Ok(Fields { path: path.to_string(), map, seen: BTreeSet::new() }),
            other => Err(Error::config(format!(
                "{} must be an object, got {}",
                if path.is_empty() { "the options".to_string() } else { format!("option `{path}`") },
                kind(other)
            ))),
        }
    }

    /// The full dotted name of `key` for messages.
    pub(crate) fn name(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// A config error about option `key`.
    pub(crate) fn error(&self, key: &str, reason: impl std::fmt::Display) -> Error {
        Error::config(format!("option `{}`: {reason}", self.name(key)))
    }

    /// The raw value of `key`; `null` counts as absent (JS `undefined`).
    pub(crate) fn raw(&mut self, key: &'static str) -> Option<&'a Value> {
        self.seen.insert(key);
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// `key` deserialized as `T`, or `None` when absent.
    pub(crate) fn get<T: DeserializeOwned>(&mut self, key: &'static str) -> Result<Option<T>> {
        match self.raw(key) {
            None => Ok(None),
            Some(v) => serde_json::from_value(v.clone())
                .map(Some)
                .map_err(|e| self.error(key, format!("{} (got {})", without_values(&e.to_string()), kind(v)))),
        }
    }

    /// A non-empty string option.
    pub(crate) fn string(&mut self, key: &'static str) -> Result<Option<String>> {
        match self.get::<String>(key)? {
            Some(s) if s.trim().is_empty() => Err(self.error(key, "must not be empty")),
            other => Ok(other),
        }
    }

    /// A positive integer option no larger than `max`.
    pub(crate) fn positive_int(&mut self, key: &'static str, max: u64) -> Result<Option<u64>> {
        let Some(v) = self.raw(key) else { return Ok(None) };
        match v.as_u64() {
            Some(n) if n >= 1 && n <= max => Ok(Some(n)),
            _ => Err(self.error(key, format!("must be an integer from 1 to {max}, got {v}"))),
        }
    }

    /// A `Record<string, string>` option, each key checked with `check_key`
    /// and each value with `check_value`.
    pub(crate) fn string_map(
        &mut self,
        key: &'static str,
        check_key: fn(&str) -> Result<(), String>,
        check_value: fn(&str) -> Result<(), String>,
    ) -> Result<BTreeMap<String, String>> {
        let Some(v) = self.raw(key) else { return Ok(BTreeMap::new()) };
        let Value::Object(map) = v else {
            return Err(self.error(key, format!("must be an object of strings, got {}", kind(v))));
        };
        let mut out = BTreeMap::new();
        for (k, val) in map {
            let Value::String(s) = val else {
                return Err(self.error(key, format!("value of {k:?} must be a string, got {}", kind(val))));
            };
            check_key(k).map_err(|e| self.error(key, e))?;
            check_value(s).map_err(|e| self.error(key, e))?;
            out.insert(k.clone(), s.clone());
        }
        Ok(out)
    }

    /// A nested object option.
    pub(crate) fn object(&mut self, key: &'static str) -> Result<Option<Fields<'a>>> {
        let name = self.name(key);
        self.raw(key).map(|v| Fields::new(&name, v)).transpose()
    }

    /// Fails if the object has keys that were never read.
    pub(crate) fn finish(self) -> Result<()> {
        let unknown: Vec<&String> = self.map.keys().filter(|k| !self.seen.contains(k.as_str())).collect();
        if let Some(k) = unknown.first() {
            // `__test…` options are test seams, not named to users.
            let known: Vec<&str> = self.seen.iter().copied().filter(|k| !k.starts_with("__test")).collect();
            return Err(Error::config(format!(
                "unknown option `{}` (known options here: {})",
                self.name(k),
                known.join(", ")
            )));
        }
        Ok(())
    }
}

/// A short description of a JSON value's type for messages (never the value,
/// which could be a secret).
pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Drops the values serde puts into its messages (`invalid type: string
/// "…"`, integer `…`): option values may be secrets. Field names in backticks
/// (`missing field \`spec\``) are kept.
fn without_values(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(start) = rest.find(['"', '`']) {
        let q = rest[start..].chars().next().unwrap_or('"');
        let Some(len) = rest[start + 1..].find(q) else { break };
        let inner = &rest[start + 1..start + 1 + len];
        let is_value = q == '"' || inner.parse::<f64>().is_ok() || inner == "true" || inner == "false";
        out.push_str(&rest[..=start]);
        out.push_str(if is_value { "…" } else { inner });
        out.push(q);
        rest = &rest[start + len + 2..];
    }
    out.push_str(rest);
    out
}

/// Accepts anything (for maps whose keys or values need no check).
pub(crate) fn any(_: &str) -> Result<(), String> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_messages_lose_values() {
        assert_eq!(
            without_values("invalid type: string \"hunter2\", expected u64"),
            "invalid type: string \"…\", expected u64"
        );
        assert_eq!(without_values("missing field `spec`"), "missing field `spec`");
        assert_eq!(
            without_values("invalid type: integer `42`, expected a string"),
            "invalid type: integer `…`, expected a string"
        );
    }
}
