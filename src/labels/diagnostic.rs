//! Diagnostics: every label problem, as data naming the container, the label
//! and the reason. A diagnostic never stops another container's routes; the
//! Docker provider logs them and the admin API lists them.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The container's name.
    pub container: String,
    /// The label the problem is about (for a group of labels, their common
    /// start, such as `dockhand.rewrite`).
    pub label: String,
    pub severity: Severity,
    pub reason: String,
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
        write!(
            f,
            "container {:?}: label {}: {}",
            self.container, self.label, self.reason
        )
    }
}

/// Collects the diagnostics of one container.
pub(crate) struct Findings<'a> {
    container: &'a str,
    diagnostics: &'a mut Vec<Diagnostic>,
}

impl<'a> Findings<'a> {
    pub fn new(container: &'a str, diagnostics: &'a mut Vec<Diagnostic>) -> Self {
        Findings {
            container,
            diagnostics,
        }
    }

    pub fn warning(&mut self, label: impl Into<String>, reason: impl Into<String>) {
        self.push(Severity::Warning, label.into(), reason.into());
    }

    pub fn error(&mut self, label: impl Into<String>, reason: impl Into<String>) {
        self.push(Severity::Error, label.into(), reason.into());
    }

    fn push(&mut self, severity: Severity, label: String, reason: String) {
        self.diagnostics.push(Diagnostic {
            container: self.container.to_owned(),
            label,
            severity,
            reason,
        });
    }
}
