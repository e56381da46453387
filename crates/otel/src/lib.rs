//! OpenTelemetry export of Strata's tracing spans — a turn (`turn`: turn id, agent,
//! session), the model calls inside it (`model_call`: provider, model) and the tool calls
//! (`tool`: tool, request id) — over OTLP/HTTP in protobuf to `<endpoint>/v1/traces`, as
//! collectors (the OpenTelemetry Collector, Jaeger, Tempo…) take them.
//!
//! Spans are batched and sent from the SDK's own thread with a blocking HTTP client, so a
//! slow or absent collector never holds a turn up; spans it cannot take are dropped (the SDK
//! logs it). The launcher's `otel` feature adds this crate to a deployment's binary.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{SpanExporter, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Subscriber;
use tracing_subscriber::registry::LookupSpan;

/// The export in progress: flushed and stopped by [`Export::shutdown`] (or when dropped).
pub struct Export {
    provider: SdkTracerProvider,
    endpoint: String,
}

impl std::fmt::Debug for Export {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Export")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// What went wrong setting up or running the export.
#[derive(Debug, thiserror::Error)]
pub enum OtelError {
    /// `telemetry.otlp_endpoint` is not an HTTP URL.
    #[error("`telemetry.otlp_endpoint` = `{endpoint}` is not an http:// or https:// URL")]
    NotHttp {
        /// The setting as written.
        endpoint: String,
    },
    /// The exporter refused the endpoint.
    #[error("`telemetry.otlp_endpoint` = `{endpoint}`: {source}")]
    Exporter {
        /// The setting as written.
        endpoint: String,
        /// The exporter's reason.
        source: opentelemetry_otlp::ExporterBuildError,
    },
    /// Flushing or stopping the export failed (the collector did not answer in time, …).
    #[error(transparent)]
    Export(#[from] opentelemetry_sdk::error::OTelSdkError),
}

/// Where spans go: `endpoint` (`http://127.0.0.1:4318`) with `/v1/traces` after it.
pub fn traces_url(endpoint: &str) -> String {
    format!("{}/v1/traces", endpoint.trim_end_matches('/'))
}

/// A `tracing` layer that exports every span to the OTLP/HTTP collector at `endpoint`, as
/// service `service_name`, and the handle that flushes it. Errors name what is wrong with
/// the endpoint.
pub fn layer<S>(
    endpoint: &str,
    service_name: &str,
) -> Result<(impl tracing_subscriber::Layer<S> + use<S>, Export), OtelError>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let url = traces_url(endpoint);
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(OtelError::NotHttp {
            endpoint: endpoint.to_owned(),
        });
    }
    let exporter = SpanExporter::builder()
        .with_http()
        .with_endpoint(url.clone())
        .build()
        .map_err(|source| OtelError::Exporter {
            endpoint: endpoint.to_owned(),
            source,
        })?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name(service_name.to_owned())
                .build(),
        )
        .build();
    let tracer = provider.tracer("strata");
    let layer = tracing_opentelemetry::layer().with_tracer(tracer);
    Ok((
        layer,
        Export {
            provider,
            endpoint: url,
        },
    ))
}

impl Export {
    /// Sends the spans not sent yet and waits for the collector's answer.
    pub fn flush(&self) -> Result<(), OtelError> {
        Ok(self.provider.force_flush()?)
    }

    /// Flushes and stops the export.
    pub fn shutdown(self) -> Result<(), OtelError> {
        Ok(self.provider.shutdown()?)
    }
}
