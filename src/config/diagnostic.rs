//! Diagnostics: every problem a provider found in its input, as data naming
//! where it is (a container or the routes file), the label or key, and the
//! reason, with the value written and the key probably meant where they are
//! known. A diagnostic never stops another container's routes; the router
//! holds the current ones of every provider and logs each once. `to_json` is
//! the one JSON form (the admin API's and `dockhand check --format json`'s).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde_json::{json, Value};

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Diagnostic {
    pub origin: Origin,
    /// The label the problem is about (for a group of labels, their common
    /// start, such as `dockhand.rewrite`), or the routes-file key path.
    pub key: String,
    pub severity: Severity,
    /// Why, without the suggestion.
    pub reason: String,
    /// The label's value as written; `None` for a label not written (a
    /// missing host), a group of labels, and the routes file.
    pub value: Option<String>,
    /// The key probably meant, when `key` looks like a typo of it.
    pub suggestion: Option<String>,
}

/// Where a problem was found.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Origin {
    /// A container's labels; by name first, so diagnostics sort by name.
    Container { name: String, id: String },
    /// A Swarm service's labels (`deploy.labels`), read once for all its tasks.
    Service { name: String, id: String },
    /// The routes file: a version that could not be loaded (the last good
    /// one is still served).
    RoutesFile { path: PathBuf },
    /// A file of the certificates directory (the last good version of its
    /// certificate, if any, is still served).
    CertificateFile { path: PathBuf },
    /// A host name whose certificate can't be ordered over ACME now.
    Acme { name: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Served, but maybe not as meant (an ignored label, a guess between candidates).
    Warning,
    /// Not served as written: the route is left out, or has no address from this container.
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Warning => "warning",
            Severity::Error => "error",
        })
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.origin {
            Origin::Container { name, .. } => {
                write!(f, "container {name:?}: label {}: {}", self.key, self.reason)?
            }
            Origin::Service { name, .. } => {
                write!(f, "service {name:?}: label {}: {}", self.key, self.reason)?
            }
            // A file that can't be read has no key to name.
            Origin::RoutesFile { path } if self.key.is_empty() => {
                write!(f, "routes file {}: {}", path.display(), self.reason)?
            }
            Origin::RoutesFile { path } => write!(
                f,
                "routes file {}: {}: {}",
                path.display(),
                self.key,
                self.reason
            )?,
            Origin::CertificateFile { path } => {
                write!(f, "certificate {}: {}", path.display(), self.reason)?
            }
            Origin::Acme { name } => write!(f, "ACME certificate for {name}: {}", self.reason)?,
        }
        did_you_mean(f, self.suggestion.as_deref())
    }
}

/// The suggestion as the text forms end with it: ` (did you mean `X`?)`.
pub(crate) fn did_you_mean(f: &mut fmt::Formatter<'_>, suggestion: Option<&str>) -> fmt::Result {
    match suggestion {
        Some(meant) => write!(f, " (did you mean `{meant}`?)"),
        None => Ok(()),
    }
}

impl Diagnostic {
    /// The JSON form: where (`source`, then `container` or `path`), what
    /// (`key`, `value`), why (`reason`, `suggestion`) and the text line (`message`).
    pub fn to_json(&self) -> Value {
        let mut object = serde_json::Map::new();
        object.insert("severity".into(), json!(self.severity.to_string()));
        match &self.origin {
            Origin::Container { name, id } => {
                object.insert("source".into(), json!("container"));
                object.insert("container".into(), json!({"name": name, "id": id}));
            }
            Origin::Service { name, id } => {
                object.insert("source".into(), json!("service"));
                object.insert("service".into(), json!({"name": name, "id": id}));
            }
            Origin::RoutesFile { path } => {
                object.insert("source".into(), json!("routes_file"));
                object.insert("path".into(), json!(path.display().to_string()));
            }
            Origin::CertificateFile { path } => {
                object.insert("source".into(), json!("certificate_file"));
                object.insert("path".into(), json!(path.display().to_string()));
            }
            Origin::Acme { name } => {
                object.insert("source".into(), json!("acme"));
                object.insert("name".into(), json!(name));
            }
        }
        object.insert("key".into(), json!(self.key));
        object.insert("value".into(), json!(self.value));
        object.insert("reason".into(), json!(self.reason));
        object.insert("suggestion".into(), json!(self.suggestion));
        object.insert("message".into(), json!(self.to_string()));
        Value::Object(object)
    }
}

/// How many diagnostics there are of each severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SeverityCounts {
    pub errors: usize,
    pub warnings: usize,
}

impl SeverityCounts {
    pub fn of<'a>(diagnostics: impl IntoIterator<Item = &'a Diagnostic>) -> SeverityCounts {
        let mut counts = SeverityCounts::default();
        for diagnostic in diagnostics {
            match diagnostic.severity {
                Severity::Error => counts.errors += 1,
                Severity::Warning => counts.warnings += 1,
            }
        }
        counts
    }

    /// `{"error": N, "warning": M}`, as the admin API and `check` write it.
    pub fn to_json(self) -> Value {
        serde_json::json!({"error": self.errors, "warning": self.warnings})
    }
}

/// Collects the diagnostics of one origin.
pub struct Findings<'a> {
    origin: Origin,
    /// What the keys hold (a container's labels), for each diagnostic's `value`.
    values: Option<&'a BTreeMap<String, String>>,
    diagnostics: &'a mut Vec<Diagnostic>,
}

impl<'a> Findings<'a> {
    pub fn new(origin: Origin, diagnostics: &'a mut Vec<Diagnostic>) -> Self {
        Findings {
            origin,
            values: None,
            diagnostics,
        }
    }

    /// Each diagnostic whose key is one of `values`' keys carries its value.
    pub fn with_values(mut self, values: &'a BTreeMap<String, String>) -> Self {
        self.values = Some(values);
        self
    }

    pub fn warning(&mut self, key: impl Into<String>, reason: impl Into<String>) {
        self.report(Severity::Warning, key, reason, None);
    }

    pub fn error(&mut self, key: impl Into<String>, reason: impl Into<String>) {
        self.report(Severity::Error, key, reason, None);
    }

    /// Any diagnostic; `suggestion` is the key probably meant.
    pub fn report(
        &mut self,
        severity: Severity,
        key: impl Into<String>,
        reason: impl Into<String>,
        suggestion: Option<String>,
    ) {
        let key = key.into();
        let value = self.values.and_then(|values| values.get(&key)).cloned();
        self.diagnostics.push(Diagnostic {
            origin: self.origin.clone(),
            key,
            severity,
            reason: reason.into(),
            value,
            suggestion,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typo() -> Diagnostic {
        let labels = BTreeMap::from([("dockhand.prot".to_owned(), "8080".to_owned())]);
        let origin = Origin::Container {
            name: "web".into(),
            id: "0123abcd".into(),
        };
        let mut diagnostics = Vec::new();
        Findings::new(origin, &mut diagnostics)
            .with_values(&labels)
            .report(
                Severity::Warning,
                "dockhand.prot",
                "unknown key, ignored",
                Some("dockhand.port".into()),
            );
        diagnostics.remove(0)
    }

    #[test]
    fn the_text_form_ends_with_the_suggestion() {
        let diagnostic = typo();
        assert_eq!(diagnostic.value.as_deref(), Some("8080"));
        assert_eq!(
            diagnostic.to_string(),
            "container \"web\": label dockhand.prot: unknown key, ignored (did you mean `dockhand.port`?)"
        );
    }

    #[test]
    fn the_json_form_has_every_field_in_order() {
        let json = typo().to_json();
        let keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "severity",
                "source",
                "container",
                "key",
                "value",
                "reason",
                "suggestion",
                "message"
            ]
        );
        assert_eq!(json["severity"], "warning");
        assert_eq!(json["source"], "container");
        assert_eq!(json["container"], json!({"name": "web", "id": "0123abcd"}));
        assert_eq!(json["value"], "8080");
        assert_eq!(json["reason"], "unknown key, ignored");
        assert_eq!(json["suggestion"], "dockhand.port");
        assert_eq!(json["message"], typo().to_string());

        let mut diagnostics = Vec::new();
        let origin = Origin::RoutesFile {
            path: "/etc/dockhand/routes.json".into(),
        };
        Findings::new(origin, &mut diagnostics).error("host", "expected an object, found a string");
        let json = diagnostics[0].to_json();
        assert_eq!(json["source"], "routes_file");
        assert_eq!(json["path"], "/etc/dockhand/routes.json");
        assert!(json.get("container").is_none(), "{json}");
        assert_eq!(json["value"], Value::Null);
        assert_eq!(json["suggestion"], Value::Null);
    }
}
