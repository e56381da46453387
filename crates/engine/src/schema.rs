//! Input schemas: generation for `#[tool]`, and a structural check for tools whose schema is
//! only data (run-time registrations).

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::spec::ToolError;

/// The JSON Schema (draft 2020-12) of an arguments type, as sent to models and MCP clients:
/// an object schema without the `$schema` and `title` noise at the top.
pub fn input_schema<T: JsonSchema>() -> Value {
    let schema = schemars::generate::SchemaSettings::draft2020_12()
        .into_generator()
        .into_root_schema_for::<T>();
    let mut v = schema.to_value();
    consts_to_enum(&mut v);
    if let Value::Object(map) = &mut v {
        map.remove("$schema");
        map.remove("title");
        map.remove("description");
        if !map.contains_key("properties") {
            map.insert("properties".into(), Value::Object(Default::default()));
        }
    }
    v
}

/// schemars renders a unit-variant enum whose variants carry doc comments as `oneOf` of
/// `const`s; models and vendors handle a plain `enum` far better. This folds such a `oneOf`
/// into `{"type": "string", "enum": [...]}`, keeping the variant docs in the description.
fn consts_to_enum(v: &mut Value) {
    match v {
        Value::Object(map) => {
            let folded = map.get("oneOf").and_then(Value::as_array).and_then(|alts| {
                let mut names = Vec::new();
                let mut notes = Vec::new();
                for a in alts {
                    let c = a.get("const")?.as_str()?;
                    if a.get("type").and_then(Value::as_str) != Some("string") {
                        return None;
                    }
                    match a.get("description").and_then(Value::as_str) {
                        Some(d) => notes.push(format!("`{c}` ({})", d.trim_end_matches('.'))),
                        None => notes.push(format!("`{c}`")),
                    }
                    names.push(Value::String(c.to_owned()));
                }
                Some((names, notes))
            });
            if let Some((names, notes)) = folded {
                map.remove("oneOf");
                map.insert("type".into(), Value::String("string".into()));
                map.insert("enum".into(), Value::Array(names));
                let base = map.get("description").and_then(Value::as_str).unwrap_or("");
                let sep = if base.is_empty() { "" } else { " " };
                let desc = format!("{base}{sep}One of: {}.", notes.join(", "));
                map.insert("description".into(), Value::String(desc));
            }
            map.values_mut().for_each(consts_to_enum);
        }
        Value::Array(items) => items.iter_mut().for_each(consts_to_enum),
        _ => {}
    }
}

/// Deserialises arguments, turning the first problem into a [`ToolError::InvalidArgs`] that
/// names the field.
pub fn parse_args<T: DeserializeOwned>(args: Value) -> Result<T, ToolError> {
    serde_path_to_error::deserialize(args).map_err(path_error)
}

/// Like [`parse_args`] but only checks, borrowing the arguments.
pub fn check_args<T: DeserializeOwned>(args: &Value) -> Result<(), ToolError> {
    serde_path_to_error::deserialize::<_, T>(args)
        .map(|_| ())
        .map_err(path_error)
}

fn path_error(e: serde_path_to_error::Error<serde_json::Error>) -> ToolError {
    let path = e.path().to_string();
    let message = e.inner().to_string();
    // serde reports a missing field at the parent's path: move the name into the path.
    let field = match backticked(&message, "missing field `") {
        Some(name) if path == "." => name,
        Some(name) => format!("{path}.{name}"),
        None => path,
    };
    ToolError::InvalidArgs { field, message }
}

fn backticked(msg: &str, prefix: &str) -> Option<String> {
    let rest = msg.strip_prefix(prefix)?;
    Some(rest.split('`').next()?.to_owned())
}

/// Serialises a tool's return value.
pub fn to_output<T: serde::Serialize>(v: T) -> Result<crate::spec::ToolOutput, ToolError> {
    serde_json::to_value(v)
        .map(crate::spec::ToolOutput)
        .map_err(|e| ToolError::failed(format!("tool output is not representable as JSON: {e}")))
}

/// Checks `args` against the parts of a JSON Schema that catch most model mistakes: `type`,
/// `required`, `properties`, `additionalProperties: false`, `enum`, and `items` — recursively.
/// Tools built with `#[tool]` use their typed deserialiser instead, which is stricter.
pub fn check_schema(schema: &Value, args: &Value) -> Result<(), ToolError> {
    check_at(schema, args, ".")
}

fn check_at(schema: &Value, v: &Value, path: &str) -> Result<(), ToolError> {
    let Value::Object(s) = schema else {
        return Ok(()); // `true` or unknown: anything goes.
    };
    if let Some(t) = s.get("type") {
        let ok = match t {
            Value::String(t) => type_matches(t, v),
            Value::Array(ts) => ts
                .iter()
                .filter_map(Value::as_str)
                .any(|t| type_matches(t, v)),
            _ => true,
        };
        if !ok {
            return Err(ToolError::invalid(
                path,
                format!("expected {}, got {}", type_name(t), value_kind(v)),
            ));
        }
    }
    if let Some(Value::Array(choices)) = s.get("enum")
        && !choices.contains(v)
    {
        let shown: Vec<String> = choices.iter().map(Value::to_string).collect();
        return Err(ToolError::invalid(
            path,
            format!("{v} is not one of {}", shown.join(", ")),
        ));
    }
    if let Value::Object(obj) = v {
        let props = s.get("properties").and_then(Value::as_object);
        if let Some(Value::Array(req)) = s.get("required") {
            for r in req.iter().filter_map(Value::as_str) {
                if !obj.contains_key(r) {
                    return Err(ToolError::invalid(
                        join(path, r),
                        format!("missing field `{r}`"),
                    ));
                }
            }
        }
        for (k, val) in obj {
            match props.and_then(|p| p.get(k)) {
                Some(ps) => check_at(ps, val, &join(path, k))?,
                None => {
                    if s.get("additionalProperties") == Some(&Value::Bool(false)) {
                        let known: Vec<&str> = props
                            .map(|p| p.keys().map(String::as_str).collect())
                            .unwrap_or_default();
                        return Err(ToolError::invalid(
                            join(path, k),
                            format!("unknown field `{k}`, expected one of {}", known.join(", ")),
                        ));
                    }
                }
            }
        }
    }
    if let (Value::Array(items), Some(item_schema)) = (v, s.get("items")) {
        for (i, it) in items.iter().enumerate() {
            check_at(
                item_schema,
                it,
                &format!("{}[{i}]", path.trim_end_matches('.')),
            )?;
        }
    }
    Ok(())
}

fn join(path: &str, key: &str) -> String {
    if path == "." {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn type_matches(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "number" => v.is_number(),
        "integer" => v.as_i64().is_some() || v.as_u64().is_some(),
        _ => true,
    }
}

fn type_name(t: &Value) -> String {
    match t {
        Value::String(s) => s.clone(),
        Value::Array(a) => a
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        other => other.to_string(),
    }
}

fn value_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn structural_check_names_the_field() {
        let schema = json!({
            "type": "object",
            "properties": {
                "n": {"type": "integer"},
                "mode": {"enum": ["a", "b"]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "inner": {"type": "object", "properties": {"x": {"type": "boolean"}}, "required": ["x"]}
            },
            "required": ["n"],
            "additionalProperties": false
        });
        let field = |args: Value| match check_schema(&schema, &args) {
            Err(ToolError::InvalidArgs { field, .. }) => field,
            other => panic!("expected invalid args, got {other:?}"),
        };
        assert!(
            check_schema(
                &schema,
                &json!({"n": 1, "tags": ["a"], "inner": {"x": true}})
            )
            .is_ok()
        );
        assert_eq!(field(json!({})), "n");
        assert_eq!(field(json!({"n": "1"})), "n");
        assert_eq!(field(json!({"n": 1.5})), "n");
        assert_eq!(field(json!({"n": 1, "mode": "c"})), "mode");
        assert_eq!(field(json!({"n": 1, "tags": ["a", 2]})), "tags[1]");
        assert_eq!(field(json!({"n": 1, "inner": {}})), "inner.x");
        assert_eq!(field(json!({"n": 1, "extra": 0})), "extra");
    }
}
