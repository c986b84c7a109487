//! Permission checks before a call changes anything.
//!
//! A call that changes a sandbox and then waits (resume → readiness, suspend
//! → pod gone, delete → objects gone) would otherwise fail on a missing
//! `list`/`watch` only after its change took effect, and tell the caller it
//! failed. So the changing calls first ask the API server what the
//! credentials may do in the namespace (one `SelfSubjectRulesReview`, which
//! every authenticated user may create) and fail with `forbidden`, nothing
//! changed, when a verb a later step needs is missing. `create` also checks
//! what `destroy` will need, so no sandbox is made that its creator cannot
//! delete.
//!
//! The review is advisory: when the server cannot answer it completely (a
//! webhook authorizer, the review itself forbidden, the server restarting)
//! the call goes ahead and the API server decides each step, as before.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{ResourceRule, SelfSubjectRulesReview, SelfSubjectRulesReviewSpec};
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::time::Instant;

use super::resources::{Kind, EXTENSIONS_GROUP, SANDBOX_GROUP};
use crate::error::{Error, ErrorCode, Result};

/// A resource as RBAC rules name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Resource {
    /// API group (`""` for core).
    pub group: &'static str,
    /// Plural, or `plural/subresource`.
    pub plural: &'static str,
}

impl Resource {
    const PODS: Resource = Resource { group: "", plural: "pods" };
    const PODS_EXEC: Resource = Resource { group: "", plural: "pods/exec" };

    fn of(kind: Kind) -> Resource {
        match kind {
            Kind::Sandbox => Resource { group: SANDBOX_GROUP, plural: "sandboxes" },
            Kind::SandboxClaim => Resource { group: EXTENSIONS_GROUP, plural: "sandboxclaims" },
            Kind::SandboxWarmPool => Resource { group: EXTENSIONS_GROUP, plural: "sandboxwarmpools" },
            Kind::SandboxTemplate => Resource { group: EXTENSIONS_GROUP, plural: "sandboxtemplates" },
        }
    }

    /// `plural.group` (`plural` for core), as errors name it.
    fn name(self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

/// Verbs a step needs on a resource.
pub(crate) type Need = (Resource, &'static [&'static str]);

/// What `destroy` does to the objects the claim or Sandbox controls: reads
/// and deletes them (the Sandbox in warm-pool mode, the pod) and waits for
/// them to go.
fn dependents(warm: bool) -> Vec<Need> {
    const DELETE: &[&str] = &["get", "delete", "list", "watch"];
    let mut needs = vec![(Resource::PODS, DELETE)];
    if warm {
        needs.push((Resource::of(Kind::Sandbox), DELETE));
    }
    needs
}

/// `create`: the create itself and everything `destroy` needs.
pub(crate) fn create(kind: Kind) -> Vec<Need> {
    let mut needs = vec![(Resource::of(kind), &["create", "get", "delete", "list", "watch"][..])];
    needs.extend(dependents(kind == Kind::SandboxClaim));
    needs
}

/// `destroy`, once it has read the object: the delete and the waits.
pub(crate) fn destroy(kind: Kind) -> Vec<Need> {
    let mut needs = vec![(Resource::of(kind), &["delete", "list", "watch"][..])];
    needs.extend(dependents(kind == Kind::SandboxClaim));
    needs
}

/// `connect` of a suspended sandbox: the resume, the readiness waits (reads
/// from the shared watches, or GETs while they are not live) and the orphan
/// sweep's exec.
pub(crate) fn resume(warm: bool) -> Vec<Need> {
    const READ: &[&str] = &["get", "list", "watch"];
    let mut needs = vec![
        (Resource::of(Kind::Sandbox), &["get", "patch", "list", "watch"][..]),
        (Resource::PODS, READ),
        (Resource::PODS_EXEC, &["get", "create"][..]),
    ];
    if warm {
        needs.push((Resource::of(Kind::SandboxClaim), READ));
    }
    needs
}

/// `suspend`: the read (from the shared watch, or a GET while it is not
/// live: so `get` is needed, or whether suspend works would depend on which
/// came first), the patch and the wait for the pod to go (the Sandbox's
/// condition, then the pod itself).
pub(crate) fn suspend() -> Vec<Need> {
    vec![
        (Resource::of(Kind::Sandbox), &["get", "patch", "list", "watch"][..]),
        (Resource::PODS, &["get", "list", "watch"][..]),
    ]
}

/// How long a review's answer serves later calls: a burst of creates makes
/// one review, not one each.
const REVIEW_FOR: Duration = Duration::from_secs(30);

/// The last complete review of a provider's namespace.
#[derive(Default)]
pub(crate) struct RulesCache {
    /// Held across a review, so concurrent calls wait for one review
    /// instead of each making their own.
    last: tokio::sync::Mutex<Option<(Instant, Arc<Vec<ResourceRule>>)>>,
}

impl RulesCache {
    /// The rules, from a review less than [`REVIEW_FOR`] old when `reuse`
    /// allows, else from a new one, and whether they are new. `None` when the
    /// server cannot say for sure (not remembered).
    async fn rules(&self, client: &Client, namespace: &str, reuse: bool) -> Option<(Arc<Vec<ResourceRule>>, bool)> {
        let mut last = self.last.lock().await;
        if let Some((_, rules)) = last.as_ref().filter(|(at, _)| reuse && at.elapsed() < REVIEW_FOR) {
            return Some((rules.clone(), false));
        }
        let rules = Arc::new(review(client, namespace).await?);
        *last = Some((Instant::now(), rules.clone()));
        Some((rules, true))
    }
}

/// The shipped Role file (under `examples/manifests/`) that grants what a
/// mode needs: the warm-pool one has no `create` on Sandboxes.
pub(crate) fn role_file(warm: bool) -> &'static str {
    if warm {
        "rbac/warm-pool.yaml"
    } else {
        "rbac/direct.yaml"
    }
}

/// Fails with `forbidden`, naming what is missing and the Role of the
/// provider's mode (`warm`), when the credentials surely lack a verb of
/// `needs` in `namespace`; `op` says what was refused. A refusal is always
/// decided on a review made for this call, so a permission given back
/// meanwhile counts.
pub(crate) async fn require(
    client: &Client,
    namespace: &str,
    op: &str,
    needs: &[Need],
    warm: bool,
    cache: &RulesCache,
) -> Result<()> {
    let Some((rules, fresh)) = cache.rules(client, namespace, true).await else { return Ok(()) };
    let mut missing = self::missing(&rules, needs);
    if !missing.is_empty() && !fresh {
        // Remembered rules may predate a permission given back: ask again.
        let Some((rules, _)) = cache.rules(client, namespace, false).await else { return Ok(()) };
        missing = self::missing(&rules, needs);
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::new(
        ErrorCode::Forbidden,
        format!(
            "{op}: forbidden: the credentials lack RBAC permission to {} in namespace {namespace:?}, \
             which this call needs (examples/manifests/{} grants what this mode needs); nothing was changed",
            missing.join("; "),
            role_file(warm)
        ),
    ))
}

/// What the credentials may do in `namespace`; `None` when the server
/// cannot say for sure.
async fn review(client: &Client, namespace: &str) -> Option<Vec<ResourceRule>> {
    let review = SelfSubjectRulesReview {
        spec: SelfSubjectRulesReviewSpec { namespace: Some(namespace.to_string()) },
        ..Default::default()
    };
    let api: Api<SelfSubjectRulesReview> = Api::all(client.clone());
    let status = api.create(&PostParams::default(), &review).await.ok()?.status?;
    (!status.incomplete).then_some(status.resource_rules)
}

/// `verbs resource` for each need `rules` do not grant.
fn missing(rules: &[ResourceRule], needs: &[Need]) -> Vec<String> {
    needs
        .iter()
        .filter_map(|(resource, verbs)| {
            let lacking: Vec<&str> = verbs.iter().copied().filter(|verb| !allows(rules, *resource, verb)).collect();
            (!lacking.is_empty()).then(|| format!("{} {}", lacking.join(", "), resource.name()))
        })
        .collect()
}

/// RBAC's matching: `*` for any verb, group or resource, `*/sub` for a
/// subresource of any resource. A rule limited to resource names counts as
/// granting: which names it means cannot be judged here.
fn allows(rules: &[ResourceRule], resource: Resource, verb: &str) -> bool {
    let sub = resource.plural.split_once('/').map(|(_, sub)| format!("*/{sub}"));
    rules.iter().any(|rule| {
        let any_of = |values: &Option<Vec<String>>, want: &str| {
            values.iter().flatten().any(|v| v == "*" || v == want || sub.as_deref() == Some(v.as_str()))
        };
        rule.verbs.iter().any(|v| v == "*" || v == verb)
            && rule.api_groups.iter().flatten().any(|g| g == "*" || g == resource.group)
            && any_of(&rule.resources, resource.plural)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> ResourceRule {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        ResourceRule {
            api_groups: Some(strings(groups)),
            resources: Some(strings(resources)),
            verbs: strings(verbs),
            resource_names: None,
        }
    }

    #[test]
    fn exact_rules_grant_only_their_verbs() {
        let rules = [rule(&[""], &["pods"], &["get", "list"])];
        assert!(allows(&rules, Resource::PODS, "list"));
        assert!(!allows(&rules, Resource::PODS, "watch"));
        assert!(!allows(&rules, Resource::PODS_EXEC, "get"), "a resource does not grant its subresources");
        assert!(!allows(&rules, Resource::of(Kind::Sandbox), "get"), "other group");
    }

    #[test]
    fn wildcards_match_as_rbac_does() {
        assert!(allows(&[rule(&["*"], &["*"], &["*"])], Resource::PODS_EXEC, "create"));
        assert!(allows(&[rule(&[""], &["*/exec"], &["create"])], Resource::PODS_EXEC, "create"));
        assert!(!allows(&[rule(&[""], &["*/log"], &["create"])], Resource::PODS_EXEC, "create"));
        assert!(allows(&[rule(&[SANDBOX_GROUP], &["*"], &["watch"])], Resource::of(Kind::Sandbox), "watch"));
    }

    #[test]
    fn missing_names_each_lacking_verb_and_resource() {
        let rules = [rule(&[SANDBOX_GROUP], &["sandboxes"], &["patch", "list"])];
        assert_eq!(missing(&rules, &suspend()), ["get, watch sandboxes.agents.x-k8s.io", "get, list, watch pods"]);
        let all = missing(&[], &resume(true));
        assert_eq!(
            all,
            [
                "get, patch, list, watch sandboxes.agents.x-k8s.io",
                "get, list, watch pods",
                "get, create pods/exec",
                "get, list, watch sandboxclaims.extensions.agents.x-k8s.io"
            ]
        );
    }

    /// The Role's rules in `examples/manifests/<file>`, the files users apply
    /// and the local cluster runs on. A parser for their shape (block list of
    /// rules, each field a flow list of quoted strings, which is JSON);
    /// anything else in the rules fails the test.
    fn shipped_role(file: &str) -> Vec<ResourceRule> {
        let path = format!("{}/../examples/manifests/{file}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let role = text.split("\n---\n").find(|doc| doc.lines().any(|l| l == "kind: Role")).expect("a Role");
        let rules = role.split_once("\nrules:\n").expect("the Role's rules").1;
        let mut parsed: Vec<ResourceRule> = Vec::new();
        for line in rules.lines().filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty()) {
            let (key, value) = line.trim_start_matches(['-', ' ']).split_once(": ").expect(line);
            let list: Vec<String> = serde_json::from_str(value).unwrap_or_else(|e| panic!("{line}: {e}"));
            if line.starts_with("- ") {
                parsed.push(rule(&[], &[], &[]));
            }
            let current = parsed.last_mut().expect(line);
            match key {
                "apiGroups" => current.api_groups = Some(list),
                "resources" => current.resources = Some(list),
                "verbs" => current.verbs = list,
                _ => panic!("unexpected field in the Role: {line}"),
            }
        }
        parsed
    }

    /// Each mode's Role grants what that mode's calls check for, and the
    /// warm-pool Role cannot create a Sandbox (a pod of the token's choosing)
    /// nor the direct one claim.
    #[test]
    fn each_modes_role_grants_its_needs_and_no_more_sandbox_rights() {
        let warm = shipped_role(role_file(true));
        for needs in [create(Kind::SandboxClaim), destroy(Kind::SandboxClaim), resume(true), suspend()] {
            assert!(missing(&warm, &needs).is_empty(), "warm pool: {needs:?}");
        }
        assert!(!allows(&warm, Resource::of(Kind::Sandbox), "create"), "{warm:?}");
        let direct = shipped_role(role_file(false));
        for needs in [create(Kind::Sandbox), destroy(Kind::Sandbox), resume(false), suspend()] {
            assert!(missing(&direct, &needs).is_empty(), "direct: {needs:?}");
        }
        assert!(!allows(&direct, Resource::of(Kind::SandboxClaim), "create"), "{direct:?}");
    }
}
