//! Reading a JSON document with a path at every step, so each problem names the
//! exact key it is about (`host."a.com".location."/x".retry.attempts: ...`), and
//! with every problem collected rather than only the first.

use std::fmt;

use serde_json::{Map, Value};

use super::diagnostic::did_you_mean;

/// One refused value: where it is and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub path: String,
    pub reason: String,
    /// The key probably meant, for an unknown key.
    pub suggestion: Option<String>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.reason)?;
        } else {
            write!(f, "{}: {}", self.path, self.reason)?;
        }
        did_you_mean(f, self.suggestion.as_deref())
    }
}

/// Every problem found in one document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// A position in the document. Keys of the format are written bare, keys the
/// user chose (host names, prefixes, addresses) quoted.
#[derive(Debug, Clone, Default)]
pub struct KeyPath(String);

impl KeyPath {
    pub fn field(&self, key: &str) -> KeyPath {
        self.join(key)
    }

    pub fn user_key(&self, key: &str) -> KeyPath {
        self.join(&format!("{key:?}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn join(&self, segment: &str) -> KeyPath {
        if self.0.is_empty() {
            KeyPath(segment.to_owned())
        } else {
            KeyPath(format!("{}.{segment}", self.0))
        }
    }
}

/// Collects problems while the parser carries on, so one load reports them all.
#[derive(Debug, Default)]
pub struct Problems(Vec<ConfigError>);

impl Problems {
    pub fn report(&mut self, path: &KeyPath, reason: impl Into<String>) {
        self.report_suggesting(path, reason, None);
    }

    /// A problem with the key probably meant.
    pub fn report_suggesting(
        &mut self,
        path: &KeyPath,
        reason: impl Into<String>,
        suggestion: Option<&str>,
    ) {
        self.0.push(ConfigError {
            path: path.0.clone(),
            reason: reason.into(),
            suggestion: suggestion.map(str::to_owned),
        });
    }

    pub fn into_result<T>(self, value: T) -> Result<T, ConfigErrors> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(ConfigErrors(self.0))
        }
    }
}

/// A JSON object being read: knows its path and which keys it may hold.
pub struct Object<'a> {
    pub map: &'a Map<String, Value>,
    pub path: KeyPath,
}

impl<'a> Object<'a> {
    /// Reads `value` as an object whose keys must be among `known`; unknown
    /// keys are reported with the nearest known one as a suggestion.
    pub fn read(
        value: &'a Value,
        path: KeyPath,
        known: &[&str],
        problems: &mut Problems,
    ) -> Option<Object<'a>> {
        let Some(map) = value.as_object() else {
            problems.report(&path, format!("expected an object, found {}", kind(value)));
            return None;
        };
        for key in map.keys() {
            if !known.contains(&key.as_str()) {
                match closest(key, known) {
                    Some(near) => problems.report_suggesting(
                        &path,
                        format!("unknown key `{key}`"),
                        Some(near),
                    ),
                    None => problems.report(
                        &path,
                        format!(
                            "unknown key `{key}` (expected one of: {})",
                            known.join(", ")
                        ),
                    ),
                }
            }
        }
        Some(Object { map, path })
    }

    pub fn get(&self, key: &str) -> Option<(&'a Value, KeyPath)> {
        self.map.get(key).map(|v| (v, self.path.field(key)))
    }

    /// A user-keyed map under `key` (`host`, `location`, `upstream`): its entries with their paths.
    pub fn entries(
        &self,
        key: &str,
        problems: &mut Problems,
    ) -> Vec<(&'a str, &'a Value, KeyPath)> {
        let Some((value, path)) = self.get(key) else {
            return Vec::new();
        };
        let Some(map) = value.as_object() else {
            problems.report(&path, format!("expected an object, found {}", kind(value)));
            return Vec::new();
        };
        map.iter()
            .map(|(k, v)| (k.as_str(), v, path.user_key(k)))
            .collect()
    }

    pub fn bool(&self, key: &str, problems: &mut Problems) -> Option<bool> {
        let (value, path) = self.get(key)?;
        let parsed = value.as_bool();
        if parsed.is_none() {
            problems.report(
                &path,
                format!("expected true or false, found {}", kind(value)),
            );
        }
        parsed
    }

    pub fn str(&self, key: &str, problems: &mut Problems) -> Option<(&'a str, KeyPath)> {
        let (value, path) = self.get(key)?;
        match value.as_str() {
            Some(text) => Some((text, path)),
            None => {
                problems.report(&path, format!("expected a string, found {}", kind(value)));
                None
            }
        }
    }

    /// An integer in `range`, reported with the range when outside it.
    pub fn integer(
        &self,
        key: &str,
        range: std::ops::RangeInclusive<u64>,
        problems: &mut Problems,
    ) -> Option<u64> {
        let (value, path) = self.get(key)?;
        match value.as_u64() {
            Some(n) if range.contains(&n) => Some(n),
            _ => {
                problems.report(&path, super::scalars::not_in_range(value, &range));
                None
            }
        }
    }
}

/// The JSON type of a value, as said in an error.
pub fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The known word nearest to `word`, if it is near enough to be a typo.
pub fn closest<'k>(word: &str, known: &[&'k str]) -> Option<&'k str> {
    known
        .iter()
        .map(|k| (edit_distance(word, k), *k))
        .filter(|(distance, k)| *distance <= (k.len() / 3).max(1))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, k)| k)
}

/// Edit distance where swapping two neighbours counts as one edit (optimal
/// string alignment), since transposed letters are the commonest typo.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    rows[0] = (0..=b.len()).collect();
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_quote_user_keys_only() {
        let path = KeyPath::default()
            .field("host")
            .user_key("a.com")
            .field("location")
            .user_key("/x");
        assert_eq!(path.0, r#"host."a.com".location."/x""#);
    }

    #[test]
    fn suggests_near_keys_only() {
        let known = ["load_balancing", "retry", "rewrite", "upstream"];
        assert_eq!(closest("upstraem", &known), Some("upstream"));
        assert_eq!(closest("retyr", &known), Some("retry"));
        assert_eq!(closest("banana", &known), None);
    }

    #[test]
    fn reports_unknown_keys_and_wrong_types() {
        let doc: Value = serde_json::json!({"retyr": 1, "enabled": "yes"});
        let mut problems = Problems::default();
        let object = Object::read(
            &doc,
            KeyPath::default(),
            &["retry", "enabled"],
            &mut problems,
        )
        .unwrap();
        assert_eq!(object.bool("enabled", &mut problems), None);
        let errors = problems.into_result(()).unwrap_err();
        assert_eq!(errors.0[0].reason, "unknown key `retyr`");
        assert_eq!(errors.0[0].suggestion.as_deref(), Some("retry"));
        let errors = errors.to_string();
        assert!(
            errors.contains("unknown key `retyr` (did you mean `retry`?)"),
            "{errors}"
        );
        assert!(
            errors.contains("enabled: expected true or false, found a string"),
            "{errors}"
        );
    }
}
