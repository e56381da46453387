//! `#[tool]`: schema generation for every supported parameter type, and argument validation.

use serde::{Deserialize, Serialize};
use serde_json::json;
use strata_engine::schemars::JsonSchema;
use strata_engine::{Capability, SideEffects, ToolContext, ToolError, tool};
use strata_runtime::Registry;

/// How loud to be.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Volume {
    /// Barely audible.
    Quiet,
    /// As usual.
    Normal,
    /// Everyone hears it.
    Loud,
}

/// Where to send it.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Target {
    /// Host name.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Labels for grouping.
    #[serde(default)]
    pub labels: Vec<String>,
}

/// Exercises every supported parameter type.
///
/// Second paragraph of the description.
#[tool(
    name = "kitchen_sink",
    capabilities = [read, network, "file-write"],
    side_effects = external,
    hitl,
    web_facing,
    timeout_secs = 7
)]
async fn kitchen_sink(
    _ctx: &ToolContext,
    /// A string.
    text: String,
    /// A small unsigned integer.
    small: u8,
    /// A signed integer.
    signed: i64,
    /// A large unsigned integer.
    count: u64,
    /// A float.
    ratio: f64,
    /// A flag.
    flag: bool,
    /// Optional text.
    note: Option<String>,
    /// A list of strings.
    tags: Vec<String>,
    /// An enum.
    volume: Volume,
    /// A nested struct.
    target: Target,
    /// Optional list of nested structs.
    more: Option<Vec<Target>>,
) -> Result<serde_json::Value, ToolError> {
    Ok(json!({
        "text": text, "small": small, "signed": signed, "count": count, "ratio": ratio,
        "flag": flag, "note": note, "tags": tags, "volume": volume, "target": target, "more": more,
    }))
}

/// Takes no arguments at all and no context.
#[tool]
async fn no_args() -> Result<&'static str, String> {
    Ok("nothing")
}

fn sink_args() -> serde_json::Value {
    json!({
        "text": "hi", "small": 7, "signed": -3, "count": 10_000_000_000u64, "ratio": 0.5,
        "flag": true, "tags": ["a"], "volume": "loud",
        "target": {"host": "127.0.0.1", "port": 80}
    })
}

#[test]
fn schema_for_every_supported_type() {
    let reg = Registry::from_inventory(&[]).expect("registry");
    let t = reg.get("kitchen_sink").expect("registered");
    let spec = t.spec();
    assert_eq!(
        spec.description,
        "Exercises every supported parameter type.\n\nSecond paragraph of the description."
    );
    assert_eq!(
        spec.capabilities,
        [Capability::Read, Capability::Network, Capability::FileWrite]
    );
    assert_eq!(spec.side_effects, SideEffects::External);
    assert!(spec.hitl && spec.web_facing);
    assert_eq!(spec.timeout, Some(std::time::Duration::from_secs(7)));
    insta::assert_json_snapshot!("kitchen_sink_schema", spec.input_schema);

    let none = reg.get("no_args").expect("no_args");
    assert_eq!(
        none.spec().input_schema,
        json!({"type": "object", "properties": {}, "additionalProperties": false})
    );
    assert_eq!(none.spec().side_effects, SideEffects::None);
    assert!(none.spec().capabilities.is_empty());
}

#[test]
fn schema_marks_optional_params_as_not_required() {
    let reg = Registry::from_inventory(&[]).expect("registry");
    let tool = reg.get("kitchen_sink").expect("t");
    let schema = &tool.spec().input_schema;
    let required: Vec<&str> = schema["required"]
        .as_array()
        .expect("required")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert!(required.contains(&"text") && required.contains(&"target"));
    assert!(!required.contains(&"note") && !required.contains(&"more"));
    assert_eq!(
        schema["properties"]["small"]["description"],
        "A small unsigned integer."
    );
}

async fn validate(args: serde_json::Value) -> Result<(), ToolError> {
    let reg = Registry::from_inventory(&[]).expect("registry");
    reg.get("kitchen_sink").expect("t").tool.validate(&args)
}

fn field_of(r: Result<(), ToolError>) -> String {
    match r {
        Err(ToolError::InvalidArgs { field, .. }) => field,
        other => panic!("expected InvalidArgs, got {other:?}"),
    }
}

#[tokio::test]
async fn validation_errors_name_the_field() {
    assert!(validate(sink_args()).await.is_ok());

    let mut a = sink_args();
    a["small"] = json!("seven");
    assert_eq!(field_of(validate(a).await), "small");

    let mut a = sink_args();
    a["small"] = json!(300);
    assert_eq!(field_of(validate(a).await), "small");

    let mut a = sink_args();
    a.as_object_mut().expect("obj").remove("text");
    let err = validate(a).await.expect_err("missing");
    assert_eq!(field_of(Err(err.clone())), "text");
    assert!(err.to_string().contains("missing field `text`"), "{err}");

    let mut a = sink_args();
    a["volume"] = json!("deafening");
    let err = validate(a).await.expect_err("variant");
    assert_eq!(field_of(Err(err.clone())), "volume");
    assert!(
        err.to_string().contains("unknown variant `deafening`"),
        "{err}"
    );

    let mut a = sink_args();
    a["target"]["port"] = json!(-1);
    assert_eq!(field_of(validate(a).await), "target.port");

    let mut a = sink_args();
    a["target"].as_object_mut().expect("obj").remove("host");
    assert_eq!(field_of(validate(a).await), "target.host");

    let mut a = sink_args();
    a["more"] = json!([{"host": "h", "port": 1}, {"host": "h", "port": "x"}]);
    assert_eq!(field_of(validate(a).await), "more[1].port");

    let mut a = sink_args();
    a["surprise"] = json!(1);
    let err = validate(a).await.expect_err("unknown field");
    assert!(
        err.to_string().contains("unknown field `surprise`"),
        "{err}"
    );
}
