//! Diagnostics: every problem a provider found in its input, as data naming
//! where it is (a container or the routes file), the label or key, and the
//! reason. A diagnostic never stops another container's routes; the router
//! holds the current ones of every provider and logs each once.

use std::fmt;
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Diagnostic {
    pub origin: Origin,
    /// The label the problem is about (for a group of labels, their common
    /// start, such as `dockhand.rewrite`), or the routes-file key path.
    pub key: String,
    pub severity: Severity,
    pub reason: String,
}

/// Where a problem was found.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Origin {
    /// A container's labels; by name first, so diagnostics sort by name.
    Container { name: String, id: String },
    /// The routes file: a version that could not be loaded (the last good
    /// one is still served).
    RoutesFile { path: PathBuf },
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
                write!(f, "container {name:?}: label {}: {}", self.key, self.reason)
            }
            Origin::RoutesFile { path } => {
                write!(
                    f,
                    "routes file {}: {}: {}",
                    path.display(),
                    self.key,
                    self.reason
                )
            }
        }
    }
}

impl Diagnostic {
    /// The admin API's and `dockhand check --format json`'s form.
    pub fn to_json(&self) -> serde_json::Value {
        let mut view = serde_json::json!({
            "severity": self.severity.to_string(),
            "key": self.key,
            "value": null,
            "reason": self.reason,
            "suggestion": null,
            "message": self.to_string(),
        });
        match &self.origin {
            Origin::Container { name, id } => {
                view["source"] = "container".into();
                view["container"] = serde_json::json!({"name": name, "id": id});
            }
            Origin::RoutesFile { path } => {
                view["source"] = "routes_file".into();
                view["path"] = path.display().to_string().into();
            }
        }
        view
    }
}

/// Collects the diagnostics of one origin.
pub struct Findings<'a> {
    origin: Origin,
    diagnostics: &'a mut Vec<Diagnostic>,
}

impl<'a> Findings<'a> {
    pub fn new(origin: Origin, diagnostics: &'a mut Vec<Diagnostic>) -> Self {
        Findings {
            origin,
            diagnostics,
        }
    }

    pub fn warning(&mut self, key: impl Into<String>, reason: impl Into<String>) {
        self.push(Severity::Warning, key.into(), reason.into());
    }

    pub fn error(&mut self, key: impl Into<String>, reason: impl Into<String>) {
        self.push(Severity::Error, key.into(), reason.into());
    }

    fn push(&mut self, severity: Severity, key: String, reason: String) {
        self.diagnostics.push(Diagnostic {
            origin: self.origin.clone(),
            key,
            severity,
            reason,
        });
    }
}
