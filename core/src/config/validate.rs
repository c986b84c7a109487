//! Syntax checks for Kubernetes names, labels, quantities and paths. Each
//! returns `Err(reason)`; the caller prefixes the option name.

/// A DNS-1123 label: at most 63 lower-case alphanumerics or '-', starting and
/// ending with an alphanumeric (namespaces, container names).
pub(crate) fn dns_label(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 63 {
        return Err(format!("{s:?} must be 1-63 characters long"));
    }
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    if !s.chars().all(ok_char) || !s.starts_with(alnum) || !s.ends_with(alnum) {
        return Err(format!(
            "{s:?} must consist of lower-case letters, digits and '-', and start and end with a letter or digit"
        ));
    }
    Ok(())
}

/// A DNS-1123 subdomain: dot-separated labels, at most 253 characters
/// (object names such as warm pools, service accounts, storage classes).
pub(crate) fn dns_subdomain(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 253 {
        return Err(format!("{s:?} must be 1-253 characters long"));
    }
    s.split('.')
        .try_for_each(dns_label)
        .map_err(|_| format!("{s:?} is not a valid Kubernetes object name (lower-case letters, digits, '-' and '.')"))
}

/// The name part of a qualified name: at most 63 characters, alphanumerics
/// plus '-', '_', '.', starting and ending alphanumeric.
fn qualified_name_part(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
        && s.starts_with(alnum)
        && s.ends_with(alnum)
}

/// A label or annotation key: `[prefix/]name` where prefix is a DNS subdomain.
pub(crate) fn qualified_key(s: &str) -> Result<(), String> {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if let Some(p) = prefix {
        dns_subdomain(p).map_err(|_| format!("key {s:?} has an invalid prefix {p:?} (must be a DNS subdomain)"))?;
    }
    if !qualified_name_part(name) {
        return Err(format!(
            "key {s:?} is invalid: the name part must be 1-63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
        ));
    }
    Ok(())
}

/// A label value: empty, or a qualified-name part.
pub(crate) fn label_value(s: &str) -> Result<(), String> {
    if s.is_empty() || qualified_name_part(s) {
        Ok(())
    } else {
        Err(format!(
            "label value {s:?} is invalid: at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
        ))
    }
}

/// An environment variable name: no '=' and non-empty, like Kubernetes; we
/// also require the portable shell form so the variable is usable from `sh`.
pub(crate) fn env_name(s: &str) -> Result<(), String> {
    let first_ok = s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
    if first_ok && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        Ok(())
    } else {
        Err(format!("environment variable name {s:?} must match [A-Za-z_][A-Za-z0-9_]*"))
    }
}

/// An absolute, normalized path inside the sandbox ("/workspace", not
/// "workspace" or "/a/../b").
pub(crate) fn absolute_path(s: &str) -> Result<(), String> {
    if !s.starts_with('/') {
        return Err(format!("{s:?} must be an absolute path"));
    }
    if s.split('/').any(|seg| seg == "." || seg == "..") || s.contains('\0') {
        return Err(format!("{s:?} must not contain '.', '..' segments or NUL"));
    }
    if s.len() > 1 && (s.ends_with('/') || s.contains("//")) {
        return Err(format!("{s:?} must not contain empty segments or a trailing '/'"));
    }
    Ok(())
}

/// True when `path` is `dir` or inside it (both normalized absolute paths).
pub(crate) fn path_within(path: &str, dir: &str) -> bool {
    dir == "/" || path == dir || path.strip_prefix(dir).is_some_and(|rest| rest.starts_with('/'))
}

/// A Kubernetes resource quantity such as "500m", "2", "1.5Gi", "1e3".
pub(crate) fn quantity(s: &str) -> Result<(), String> {
    let err = || format!("{s:?} is not a Kubernetes quantity (examples: \"500m\", \"2\", \"512Mi\", \"10Gi\")");
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let num_end = body.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(body.len());
    let (num, suffix) = body.split_at(num_end);
    let digits_ok = match num.split_once('.') {
        Some((a, b)) => !(b.contains('.') || (a.is_empty() && b.is_empty())),
        None => !num.is_empty(),
    };
    if !digits_ok {
        return Err(err());
    }
    const SUFFIXES: [&str; 16] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E"];
    let exponent_ok = |e: &str| {
        let digits = e.strip_prefix(['+', '-']).unwrap_or(e);
        !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
    };
    let suffix_ok = SUFFIXES.contains(&suffix) || suffix.strip_prefix(['e', 'E']).is_some_and(exponent_ok);
    if suffix_ok && !s.starts_with('-') {
        Ok(())
    } else {
        Err(err())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_names() {
        assert!(dns_label("pool-workspace").is_ok());
        assert!(dns_label("Pool").is_err());
        assert!(dns_label("-a").is_err());
        assert!(dns_label(&"a".repeat(64)).is_err());
        assert!(dns_subdomain("a.b-c").is_ok());
        assert!(dns_subdomain("a..b").is_err());
        assert!(qualified_key("example.com/team").is_ok());
        assert!(qualified_key("team").is_ok());
        assert!(qualified_key("Bad_/x").is_err());
        assert!(qualified_key("example.com/").is_err());
        assert!(label_value("").is_ok());
        assert!(label_value("a b").is_err());
    }

    #[test]
    fn env_and_paths() {
        assert!(env_name("FOO_1").is_ok());
        assert!(env_name("1FOO").is_err());
        assert!(env_name("A=B").is_err());
        assert!(absolute_path("/workspace").is_ok());
        assert!(absolute_path("/").is_ok());
        assert!(absolute_path("workspace").is_err());
        assert!(absolute_path("/a/../b").is_err());
        assert!(absolute_path("/a/").is_err());
        assert!(path_within("/workspace/x", "/workspace"));
        assert!(path_within("/workspace", "/workspace"));
        assert!(!path_within("/workspace2", "/workspace"));
        assert!(path_within("/anything", "/"));
    }

    #[test]
    fn quantities() {
        for ok in ["1", "500m", "1.5Gi", "10Gi", "0.5", "1e3", "2E-1", ".5"] {
            assert!(quantity(ok).is_ok(), "{ok}");
        }
        for bad in ["", "1GB", "abc", "-1", "1..2", "Gi", "1e"] {
            assert!(quantity(bad).is_err(), "{bad}");
        }
    }
}
