//! The Prometheus recorder behind `/metrics` (`metrics.*`): installed once by `serve`, its
//! handle kept for the HTTP state and an upkeep task.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{Context, bail};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use strata_engine::config::LoadedConfig;

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Latency buckets in seconds, shared by every histogram: a tool call takes milliseconds, a
/// model call or an approval wait minutes.
const BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// Installs the recorder (unless `metrics.enabled: false`) and describes every metric. Call
/// from inside the runtime: it spawns the upkeep task. Idempotent.
pub fn install(cfg: &LoadedConfig) -> anyhow::Result<()> {
    if !cfg.config.metrics.enabled || HANDLE.get().is_some() {
        return Ok(());
    }
    let handle = PrometheusBuilder::new()
        .set_buckets(BUCKETS)
        .context("metrics buckets")?
        .install_recorder()
        .context("installing the metrics recorder")?;
    // Handles cached before (no-ops: there was no recorder) register again with this one.
    strata_engine::meters::forget_handles();
    strata_engine::meters::describe();
    strata_engine::meters::build_info(env!("CARGO_PKG_VERSION"));
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    let _ = HANDLE.set(handle);
    Ok(())
}

/// The renderer for `GET /metrics`, when the recorder is installed.
pub fn render() -> Option<strata_http::MetricsRender> {
    let h = HANDLE.get()?.clone();
    Some(Arc::new(move || h.render()))
}

/// `metrics.bind`, checked: a loopback address (the listener has no token).
pub fn bind_addr(cfg: &LoadedConfig) -> anyhow::Result<Option<SocketAddr>> {
    let m = &cfg.config.metrics;
    let Some(b) = m.bind.as_deref() else {
        return Ok(None);
    };
    if !m.enabled {
        bail!("`metrics.bind` is set but `metrics.enabled` is false");
    }
    let addr: SocketAddr = b.parse().with_context(|| {
        format!("`metrics.bind` = `{b}` is not an address such as 127.0.0.1:9464")
    })?;
    if !addr.ip().is_loopback() {
        bail!(
            "`metrics.bind` = `{b}` is not a loopback address: its /metrics needs no token, so \
             it may only listen on 127.0.0.1 or ::1 (scrape the main port with a token instead)"
        );
    }
    Ok(Some(addr))
}
