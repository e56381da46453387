//! The metrics recorder `serve` installs (Prometheus), behind a switch: a process can hold
//! one global recorder only, and the benches compare the same work with metrics on and off
//! in one process, alternating.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};

struct Switch {
    on: AtomicBool,
    inner: PrometheusRecorder,
}

impl Recorder for Switch {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_counter(key, unit, description);
    }
    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_gauge(key, unit, description);
    }
    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_histogram(key, unit, description);
    }
    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        if self.on.load(Ordering::Relaxed) {
            self.inner.register_counter(key, metadata)
        } else {
            Counter::noop()
        }
    }
    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        if self.on.load(Ordering::Relaxed) {
            self.inner.register_gauge(key, metadata)
        } else {
            Gauge::noop()
        }
    }
    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        if self.on.load(Ordering::Relaxed) {
            self.inner.register_histogram(key, metadata)
        } else {
            Histogram::noop()
        }
    }
}

static SWITCH: OnceLock<&'static Switch> = OnceLock::new();

/// Installs the switchable recorder (once; off) and turns it `on` or off.
pub fn set(on: bool) {
    let s = SWITCH.get_or_init(|| {
        let s: &'static Switch = Box::leak(Box::new(Switch {
            on: AtomicBool::new(false),
            inner: PrometheusBuilder::new().build_recorder(),
        }));
        // The first recorder of the process wins; the benches install no other.
        let _ = metrics::set_global_recorder(s);
        // As `serve` does (every 5 s there): histograms' samples are folded in.
        let handle = s.inner.handle();
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
                handle.run_upkeep();
            }
        });
        s
    });
    s.on.store(on, Ordering::Relaxed);
    // Handles taken while it was the other way round would keep counting (or not).
    strata_engine::meters::forget_handles();
}
