//! The user's own app (`--app MODULE:ATTR`): an adapter behind the
//! protocol that loads the user's configured object (a Celery app, a
//! Dramatiq broker, arq `WorkerSettings`, RQ's classes) instead of its own
//! configuration, so that the settings that decide redelivery are the
//! user's.
//!
//! The channel is the environment: the command line exports
//! [`APP_ENV`]`=MODULE:ATTR` before it starts anything, every `exec:` child
//! inherits it, and the adapter answers its hello with an [`App`] (the
//! protocol's optional `app`): what it loaded, the library versions, the
//! user's settings that decide redelivery as it read them, and what it had
//! to override to drive the queue step by step (the broker URL, the queue
//! name, a solo pool). [`confirm`] refuses a hello that does not say it
//! loaded the app asked for: an adapter that ignored `$ACKGAP_APP` would
//! judge its own configuration under the user's name.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The environment variable that names the user's app to an `exec:`
/// adapter (`MODULE:ATTR`).
pub const APP_ENV: &str = "ACKGAP_APP";

/// What an adapter loaded for [`APP_ENV`], as its hello's `app` says.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct App {
    /// `MODULE:ATTR`, as asked.
    pub spec: String,
    /// What the attribute is (`Celery app`, `RedisBroker`, ...).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// The library versions the adapter runs, by package.
    #[serde(default)]
    pub versions: BTreeMap<String, String>,
    /// The user's settings that decide redelivery, as the adapter read
    /// them from the app (kept as they are).
    #[serde(default)]
    pub settings: BTreeMap<String, String>,
    /// What the adapter set over the app's own value to drive the queue
    /// step by step, each with the value it used and why.
    #[serde(default)]
    pub overridden: BTreeMap<String, String>,
}

impl App {
    /// The app asked for: [`APP_ENV`] when set and not empty.
    pub fn asked() -> Option<String> {
        std::env::var(APP_ENV).ok().filter(|s| !s.trim().is_empty())
    }

    /// The app in lines for a terminal or a page: what was loaded, the
    /// versions, the user's settings, what was overridden.
    pub fn lines(&self) -> Vec<String> {
        let pairs = |m: &BTreeMap<String, String>, sep: &str| {
            let all: Vec<String> = m.iter().map(|(k, v)| format!("{k}{sep}{v}")).collect();
            if all.is_empty() {
                "none".to_owned()
            } else {
                all.join(", ")
            }
        };
        let kind = if self.kind.is_empty() {
            String::new()
        } else {
            format!(" ({})", self.kind)
        };
        vec![
            format!("app: {}{kind}", self.spec),
            format!("app's libraries: {}", pairs(&self.versions, " ")),
            format!("app's settings (kept): {}", pairs(&self.settings, " = ")),
            format!(
                "overridden by the adapter: {}",
                pairs(&self.overridden, " = ")
            ),
        ]
    }
}

/// Whether a hello's `app` answers what [`APP_ENV`] asked (`asked`): an
/// app asked for and not loaded (or another one), or one loaded though
/// none was asked, is a refused hello, in words.
pub(crate) fn confirm(asked: Option<&str>, answered: Option<&App>) -> Result<(), String> {
    match (asked, answered) {
        (None, None) => Ok(()),
        (Some(a), Some(app)) if app.spec == a => Ok(()),
        (Some(a), Some(app)) => Err(format!(
            "${APP_ENV} asked for the app {a:?}, and the adapter's hello says it loaded {:?}",
            app.spec
        )),
        (Some(a), None) => Err(format!(
            "--app {a} (${APP_ENV}) was given, but the adapter's hello has no `app`: it does not \
             load the user's app, and would judge its own configuration under that name"
        )),
        (None, Some(app)) => Err(format!(
            "the adapter's hello says it loaded the app {:?}, but no --app (${APP_ENV}) was given",
            app.spec
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::{confirm, App};

    /// A hello that loaded the app asked for passes; one that loaded none,
    /// another, or one not asked for is refused, in words.
    #[test]
    fn a_hello_must_answer_exactly_the_app_asked_for() {
        let app = |spec: &str| App {
            spec: spec.into(),
            ..App::default()
        };
        assert!(confirm(None, None).is_ok());
        assert!(confirm(Some("m:a"), Some(&app("m:a"))).is_ok());
        let none = confirm(Some("m:a"), None).unwrap_err();
        assert!(none.contains("has no `app`"), "{none}");
        let other = confirm(Some("m:a"), Some(&app("m:b"))).unwrap_err();
        assert!(other.contains("\"m:b\""), "{other}");
        let unasked = confirm(None, Some(&app("m:a"))).unwrap_err();
        assert!(unasked.contains("no --app"), "{unasked}");
    }
}
