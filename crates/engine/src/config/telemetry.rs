//! `telemetry.*`: OpenTelemetry export of the turns' and tool calls' spans (a launcher built
//! with its `otel` feature).

use serde::{Deserialize, Serialize};

/// `telemetry.*`
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// An OTLP/HTTP collector (`http://127.0.0.1:4318`): spans are sent to
    /// `<endpoint>/v1/traces` in protobuf. Unset: no export.
    pub otlp_endpoint: Option<String>,
    /// `service.name` on every span (default `strata`).
    pub service_name: Option<String>,
}
