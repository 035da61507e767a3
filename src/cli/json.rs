//! The shape every `--json` output shares (docs/json.md): one object, `"version": 1` at its
//! top level, `null` for a value that is not known (never `""`). Commands build their
//! reports as types; this is the one place that turns them into the printed interface.

use serde::Serialize;
use serde_json::Value;

/// The version of the JSON interface; raised when a field changes meaning or goes away
/// (added fields do not raise it).
pub const VERSION: u64 = 1;

/// `value` as the printed object: a report that serializes to an object gets `version`
/// beside its fields; anything else (a list) is put under `key`. Empty strings, which the
/// reports use for "not known" (a token of a child without partitions, a key fingerprint
/// of a failed check), become `null`, so a reader tells "unknown" from a value.
pub fn shape<T: Serialize + ?Sized>(value: &T, key: &str) -> serde_json::Result<Value> {
    let mut v = serde_json::to_value(value)?;
    nulls_for_empty(&mut v);
    let mut obj = match v {
        Value::Object(m) => m,
        other => {
            let mut m = serde_json::Map::new();
            m.insert(key.to_string(), other);
            m
        }
    };
    obj.insert("version".into(), Value::from(VERSION));
    Ok(Value::Object(obj))
}

/// Prints `value` shaped (see [`shape`]), pretty.
pub fn print<T: Serialize + ?Sized>(value: &T, key: &str) -> serde_json::Result<()> {
    println!("{}", serde_json::to_string_pretty(&shape(value, key)?)?);
    Ok(())
}

/// `{"version": 1, "error": {...}}`: a refusal or failure, on one line.
pub fn print_error(error: Value) {
    let mut m = serde_json::Map::new();
    m.insert("error".into(), error);
    m.insert("version".into(), Value::from(VERSION));
    println!("{}", Value::Object(m));
}

fn nulls_for_empty(v: &mut Value) {
    match v {
        Value::String(s) if s.is_empty() => *v = Value::Null,
        Value::Array(a) => a.iter_mut().for_each(nulls_for_empty),
        Value::Object(m) => m.values_mut().for_each(nulls_for_empty),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_get_version_lists_a_key_empties_null() {
        let v = shape(&serde_json::json!({"a": "", "b": ["x", ""]}), "unused").unwrap();
        assert_eq!(
            v,
            serde_json::json!({"a": null, "b": ["x", null], "version": 1})
        );
        let v = shape(&vec![1, 2], "items").unwrap();
        assert_eq!(v, serde_json::json!({"items": [1, 2], "version": 1}));
    }
}
