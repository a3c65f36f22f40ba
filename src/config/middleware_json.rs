//! The routes file's side of `WrittenSettings`: a location's middleware
//! keys as nested objects (`"redirect": {"regex": ...}`), flattened to the
//! dotted keys labels use, each with its path in the file for problems.
//! Unknown keys within them are reported with the nearest known one.

use std::collections::BTreeMap;

use serde_json::Value;

use super::json_reader::{closest, kind, KeyPath, Object, Problems};
use super::middleware::{
    is_middleware_key, SwitchOrList, WrittenSettings, MIDDLEWARE_KEYS, RESPONSE_HEADER_SET_START,
};

/// The location keys that start middleware settings (`redirect`, `cors`...).
pub fn middleware_roots() -> Vec<&'static str> {
    let mut roots: Vec<&str> = MIDDLEWARE_KEYS
        .iter()
        .chain([&RESPONSE_HEADER_SET_START])
        .map(|key| key.split('.').next().unwrap_or(key))
        .collect();
    roots.dedup();
    roots
}

/// What a location's middleware keys hold: the values, and the objects
/// on the way to them (`redirect`, `headers.response`), by dotted key.
#[derive(Default)]
struct Found<'a> {
    values: BTreeMap<String, (&'a Value, KeyPath)>,
    objects: BTreeMap<String, KeyPath>,
}

/// One location's middleware values, by dotted key.
pub struct JsonSettings<'a, 'p> {
    values: BTreeMap<String, (&'a Value, KeyPath)>,
    objects: BTreeMap<String, KeyPath>,
    location: KeyPath,
    problems: &'p mut Problems,
}

impl<'a, 'p> JsonSettings<'a, 'p> {
    /// The middleware keys of `location` (already checked for unknown keys
    /// at its own level).
    pub fn of(location: &Object<'a>, problems: &'p mut Problems) -> JsonSettings<'a, 'p> {
        let mut found = Found::default();
        for root in middleware_roots() {
            if let Some((value, path)) = location.get(root) {
                flatten(root, value, path, &mut found, problems);
            }
        }
        JsonSettings {
            values: found.values,
            objects: found.objects,
            location: location.path.clone(),
            problems,
        }
    }

    fn get(&self, key: &str) -> Option<(&'a Value, KeyPath)> {
        self.values
            .get(key)
            .map(|(value, path)| (*value, path.clone()))
    }

    fn wrong_type(&mut self, path: &KeyPath, expected: &str, value: &Value) {
        self.problems
            .report(path, format!("expected {expected}, found {}", kind(value)));
    }
}

/// Puts the leaves under `key` into `values`: a known key is a leaf, an
/// object on the way to known keys is walked into, anything else is unknown.
fn flatten<'a>(
    key: &str,
    value: &'a Value,
    path: KeyPath,
    found: &mut Found<'a>,
    problems: &mut Problems,
) {
    if is_middleware_key(key) {
        found.values.insert(key.to_owned(), (value, path));
        return;
    }
    let start = format!("{key}.");
    let is_map = start == RESPONSE_HEADER_SET_START;
    let below: Vec<&str> = MIDDLEWARE_KEYS
        .iter()
        .chain([&RESPONSE_HEADER_SET_START])
        .filter_map(|known| known.strip_prefix(start.as_str()))
        .map(|rest| rest.split('.').next().unwrap_or(rest))
        .filter(|segment| !segment.is_empty())
        .collect();
    let Some(object) = value.as_object() else {
        problems.report(&path, format!("expected an object, found {}", kind(value)));
        return;
    };
    found.objects.insert(key.to_owned(), path.clone());
    for (name, inner) in object {
        let inner_key = format!("{start}{name}");
        if is_map {
            found.values.insert(inner_key, (inner, path.user_key(name)));
        } else if below.contains(&name.as_str()) {
            flatten(&inner_key, inner, path.field(name), found, problems);
        } else {
            problems.report_suggesting(
                &path,
                format!("unknown key `{name}`"),
                closest(name, &below),
            );
        }
    }
}

impl WrittenSettings for JsonSettings<'_, '_> {
    fn is_written(&self, key: &str) -> bool {
        self.values.contains_key(key)
    }

    fn text(&mut self, key: &str) -> Option<String> {
        let (value, path) = self.get(key)?;
        match value {
            Value::String(text) => Some(text.clone()),
            Value::Number(number) => Some(number.to_string()),
            other => {
                self.wrong_type(&path, "a string", other);
                None
            }
        }
    }

    fn boolean(&mut self, key: &str) -> Option<bool> {
        let (value, path) = self.get(key)?;
        let parsed = value.as_bool();
        if parsed.is_none() {
            self.wrong_type(&path, "true or false", value);
        }
        parsed
    }

    fn list(&mut self, key: &str) -> Option<Vec<String>> {
        let (value, path) = self.get(key)?;
        let items = value.as_array().and_then(|items| {
            items
                .iter()
                .map(|item| item.as_str().map(str::to_owned))
                .collect::<Option<Vec<String>>>()
        });
        if items.is_none() {
            self.wrong_type(&path, "an array of strings", value);
        }
        items
    }

    fn switch_or_list(&mut self, key: &str) -> Option<SwitchOrList> {
        let (value, path) = self.get(key)?;
        match value {
            Value::Bool(on) => Some(SwitchOrList::Switch(*on)),
            Value::Array(_) => self.list(key).map(SwitchOrList::List),
            other => {
                self.wrong_type(&path, "true, false or an array of strings", other);
                None
            }
        }
    }

    fn entries(&mut self, start: &str) -> Vec<(String, String)> {
        let found: Vec<(String, &Value, KeyPath)> = self
            .values
            .range(start.to_owned()..)
            .take_while(|(key, _)| key.starts_with(start))
            .map(|(key, (value, path))| (key[start.len()..].to_owned(), *value, path.clone()))
            .collect();
        let mut entries = Vec::with_capacity(found.len());
        for (name, value, path) in found {
            match value.as_str() {
                Some(text) => entries.push((name, text.to_owned())),
                None => self.wrong_type(&path, "a string", value),
            }
        }
        entries
    }

    fn refuse(&mut self, key: &str, reason: String) {
        let path = match self.values.get(key) {
            Some((_, path)) => path.clone(),
            // A missing key: at the nearest object written on its way (the
            // reason names the key), so every path names a key of the file.
            None => {
                let parents = key.rmatch_indices('.').map(|(end, _)| &key[..end]);
                parents
                    .filter_map(|parent| self.objects.get(parent))
                    .next()
                    .cloned()
                    .unwrap_or_else(|| self.location.clone())
            }
        };
        self.problems.report(&path, reason);
    }
}
