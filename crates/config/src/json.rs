//! JSON that keeps its object keys in file order: servers imported from an `mcpServers` file
//! keep the user's order, and `mcpgw client-config` merging one entry into a client's
//! configuration file (`~/.claude.json` holds a whole application's state) rewrites nothing
//! else in another order.
//!
//! serde_json's `preserve_order` feature was rejected: features are unified across the build,
//! so it would change the key order of every `serde_json::Map` in the gateway (tool
//! definitions, their hashes for pinning) for the sake of one command.

use std::fmt;

use serde::{
    Deserialize, Deserializer, Serialize, Serializer,
    de::{MapAccess, SeqAccess, Visitor},
    ser::{SerializeMap, SerializeSeq},
};

/// A JSON value whose objects are key-value pairs in their original order.
#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    pub fn object(pairs: impl IntoIterator<Item = (&'static str, Json)>) -> Json {
        Json::Object(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
    }

    pub fn string(text: impl Into<String>) -> Json {
        Json::String(text.into())
    }

    pub fn strings<S: Into<String>>(items: impl IntoIterator<Item = S>) -> Json {
        Json::Array(items.into_iter().map(|s| Json::String(s.into())).collect())
    }

    /// The value under `key`, if this is an object that has it.
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(pairs) => pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The value under `key` of an object, inserted at the end as `default` when missing.
    /// `None` when this is not an object.
    pub fn entry(&mut self, key: &str, default: impl FnOnce() -> Json) -> Option<&mut Json> {
        let Json::Object(pairs) = self else {
            return None;
        };
        let at = match pairs.iter().position(|(k, _)| k == key) {
            Some(at) => at,
            None => {
                pairs.push((key.to_owned(), default()));
                pairs.len() - 1
            }
        };
        Some(&mut pairs[at].1)
    }

    /// Removes `key` from an object; whether it was there.
    pub fn remove(&mut self, key: &str) -> bool {
        match self {
            Json::Object(pairs) => {
                let before = pairs.len();
                pairs.retain(|(k, _)| k != key);
                pairs.len() != before
            }
            _ => false,
        }
    }

    /// The same value as a `serde_json::Value`, for comparisons that ignore key order.
    pub fn to_value(&self) -> serde_json::Value {
        match self {
            Json::Null => serde_json::Value::Null,
            Json::Bool(b) => serde_json::Value::Bool(*b),
            Json::Number(n) => serde_json::Value::Number(n.clone()),
            Json::String(s) => serde_json::Value::String(s.clone()),
            Json::Array(items) => items.iter().map(Json::to_value).collect(),
            Json::Object(pairs) => serde_json::Value::Object(
                pairs
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_value()))
                    .collect(),
            ),
        }
    }

    /// What kind of value this is, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "a boolean",
            Json::Number(_) => "a number",
            Json::String(_) => "a string",
            Json::Array(_) => "an array",
            Json::Object(_) => "an object",
        }
    }
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Null => serializer.serialize_unit(),
            Json::Bool(b) => serializer.serialize_bool(*b),
            Json::Number(n) => n.serialize(serializer),
            Json::String(s) => serializer.serialize_str(s),
            Json::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Json::Object(pairs) => {
                let mut map = serializer.serialize_map(Some(pairs.len()))?;
                for (k, v) in pairs {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Json, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_none<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_bool<E>(self, b: bool) -> Result<Json, E> {
        Ok(Json::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Json, E> {
        Ok(Json::Number(n.into()))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Json, E> {
        Ok(Json::Number(n.into()))
    }

    fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<Json, E> {
        serde_json::Number::from_f64(n)
            .map(Json::Number)
            .ok_or_else(|| E::custom("a number JSON cannot hold"))
    }

    fn visit_str<E>(self, s: &str) -> Result<Json, E> {
        Ok(Json::String(s.to_owned()))
    }

    fn visit_string<E>(self, s: String) -> Result<Json, E> {
        Ok(Json::String(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut pairs: Vec<(String, Json)> = Vec::new();
        while let Some((key, value)) = map.next_entry::<String, Json>()? {
            // A repeated key: the last one wins, as in every JSON reader the clients use.
            pairs.retain(|(k, _)| *k != key);
            pairs.push((key, value));
        }
        Ok(Json::Object(pairs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_their_order_through_a_round_trip() {
        let text = r#"{"zeta":1,"alpha":{"y":[true,null,2.5],"b":"x"},"mid":-3}"#;
        let json: Json = serde_json::from_str(text).expect("parses");
        assert_eq!(serde_json::to_string(&json).expect("prints"), text);
        assert_eq!(
            json.to_value(),
            serde_json::from_str::<serde_json::Value>(text).expect("parses")
        );
    }

    #[test]
    fn entry_inserts_at_the_end_and_remove_takes_out() {
        let mut json: Json = serde_json::from_str(r#"{"b":1,"a":2}"#).expect("parses");
        json.entry("c", || Json::Null);
        json.remove("b");
        assert_eq!(
            serde_json::to_string(&json).expect("prints"),
            r#"{"a":2,"c":null}"#
        );
        assert!(Json::Bool(true).entry("x", || Json::Null).is_none());
    }

    #[test]
    fn object_keys_keep_document_order() {
        let json: Result<Json, _> =
            serde_json::from_str(r#"{"z": 1, "a": [true, null, "s"], "m": {"y": 2.5, "b": -1}}"#);
        let keys = |j: &Json| match j {
            Json::Object(entries) => entries.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
            _ => Vec::new(),
        };
        let json = json.ok();
        assert_eq!(
            json.as_ref().map(keys),
            Some(vec!["z".into(), "a".into(), "m".into()])
        );
        let inner = json.as_ref().and_then(|j| j.get("m"));
        assert_eq!(inner.map(keys), Some(vec!["y".into(), "b".into()]));
        assert_eq!(
            inner.and_then(|m| m.get("y")),
            serde_json::Number::from_f64(2.5).map(Json::Number).as_ref()
        );
    }
}
