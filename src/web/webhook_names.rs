//! What the one-segment webhook URLs name: `{source}` of `/api/v1/alerts/{source}/webhook`
//! and `{receiver}` of the bot webhooks. `NAMESPACE.NAME` names that namespace's resource (a
//! namespace name has no dot, so the first dot ends it); a plain name is a resource of the
//! webhook namespace (`webhook_namespace`, by default the home namespace). The segment and
//! that setting alone decide it: a resource declared in another namespace, of any name,
//! never changes where an existing URL goes.

/// A resource a webhook URL names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Named<'a> {
    /// Its namespace.
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
    /// Whether the segment was a plain name (the webhook namespace's).
    pub short: bool,
}

/// The resource `segment` names, a plain name being one of `webhook_namespace`.
pub fn resolve<'a>(segment: &'a str, webhook_namespace: &'a str) -> Named<'a> {
    match segment.split_once('.') {
        Some((namespace, name)) => Named { namespace, name, short: false },
        None => Named { namespace: webhook_namespace, name: segment, short: true },
    }
}

impl Named<'_> {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// What a refusal says of a resource that is not there: where a plain name looks, and the
    /// form that names another namespace's.
    pub fn not_found(&self, what: &str) -> String {
        let Named { namespace, name, .. } = self;
        if self.short {
            format!(
                "no {what} {name:?} in namespace {namespace:?}: a plain name in this URL names a resource of the \
                 webhook namespace (setting webhook_namespace); write NAMESPACE.{name} for another namespace's"
            )
        } else {
            format!("no {what} {name:?} in namespace {namespace:?}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_name_is_the_webhook_namespaces_and_a_dotted_one_names_its_namespace() {
        let named = |segment| {
            let n = resolve(segment, "ops");
            (n.namespace, n.name, n.short)
        };
        assert_eq!(named("am"), ("ops", "am", true));
        assert_eq!(named("team-a.am"), ("team-a", "am", false));
        // Only the first dot ends the namespace: a name may hold dots.
        assert_eq!(named("team-a.am.v2"), ("team-a", "am.v2", false));
        assert_eq!(named("ops."), ("ops", "", false));
        assert_eq!(named(".am"), ("", "am", false));
        assert_eq!(resolve("team-a.am", "ops").key(), "team-a/am");
    }

    #[test]
    fn a_missing_resource_names_where_a_plain_name_looks_and_how_to_reach_another_namespace() {
        let short = resolve("am", "ops").not_found("AlertSource");
        assert!(short.starts_with("no AlertSource \"am\" in namespace \"ops\""), "{short}");
        assert!(short.contains("webhook_namespace") && short.contains("NAMESPACE.am"), "{short}");
        assert_eq!(
            resolve("team-a.am", "ops").not_found("AlertSource"),
            "no AlertSource \"am\" in namespace \"team-a\""
        );
    }
}
