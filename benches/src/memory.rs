//! Memory recall: keyword (FTS5) and hybrid (FTS5 + brute-force cosine over 384-dim vectors,
//! fused by reciprocal rank) at 10,000 and 100,000 memories, and store throughput. The
//! embedder is in-process (a seeded random vector per text), so the figures are our recall
//! cost, not an embedding server's latency.

use std::sync::Arc;
use std::time::Instant;

use strata_engine::config::Config;
use strata_engine::memory::{
    Embedder, Embedding, MemoryBackend, MemoryQuery, MemoryScope, MemoryType, NewMemory,
    SearchMode, Viewer,
};
use strata_memory::{MemoryMaintenance, SqliteMemory};

use crate::{Report, Row, median, quantile};

const DIM: usize = 384;

/// A synthetic vocabulary of pronounceable words. Texts draw word ranks log-uniformly
/// (Zipf-like) from rank 100 on: the hundred most frequent words of real text are stop words,
/// which the query builder drops anyway.
fn vocabulary() -> Vec<String> {
    let cons = [
        "b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z",
    ];
    let vows = ["a", "e", "i", "o", "u"];
    let mut out = Vec::new();
    for a in cons {
        for b in vows {
            for c in cons {
                for d in vows {
                    for e in ["", "n", "r", "s"] {
                        out.push(format!("{a}{b}{c}{d}{e}"));
                    }
                }
            }
        }
    }
    out.truncate(20_000);
    out
}

fn word<'a>(vocab: &'a [String], r: &mut fastrand::Rng) -> &'a str {
    let span = vocab.len() as f64 / 100.0;
    let i = (100.0 * span.powf(r.f64())) as usize;
    &vocab[i.min(vocab.len() - 1)]
}

fn vector(seed: u64) -> Vec<f32> {
    let mut r = fastrand::Rng::with_seed(seed);
    (0..DIM).map(|_| r.f32() * 2.0 - 1.0).collect()
}

struct SeededEmbedder;

impl Embedder for SeededEmbedder {
    fn name(&self) -> String {
        "seeded".into()
    }
    fn embed<'a>(&'a self, texts: &'a [String]) -> Embedding<'a> {
        Box::pin(async move {
            Ok(texts
                .iter()
                .map(|t| {
                    vector(
                        t.bytes()
                            .fold(5381u64, |h, b| h.wrapping_mul(33) ^ u64::from(b)),
                    )
                })
                .collect())
        })
    }
}

fn sentence(vocab: &[String], r: &mut fastrand::Rng, i: usize) -> String {
    let s: Vec<&str> = (0..12).map(|_| word(vocab, r)).collect();
    format!("{} note{i}", s.join(" "))
}

fn stats(lat: &mut [f64], secs: f64) -> Row {
    lat.sort_by(f64::total_cmp);
    Row {
        throughput_per_s: lat.len() as f64 / secs,
        p50_us: quantile(lat, 0.5),
        p99_us: quantile(lat, 0.99),
        ..Row::default()
    }
}

/// Fills `mem` with `size` memories (a quarter agent-scoped, all with vectors) and measures
/// keyword and hybrid recall.
fn recall(
    rt: &tokio::runtime::Runtime,
    mem: &dyn MemoryMaintenance,
    vocab: &[String],
    size: usize,
    queries: usize,
    runs: usize,
    op: &Viewer,
) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    let mut r = fastrand::Rng::with_seed(7);
    for chunk in 0..size.div_ceil(10_000) {
        let n = (size - chunk * 10_000).min(10_000);
        let items: Vec<NewMemory> = (0..n)
            .map(|i| NewMemory {
                content: sentence(vocab, &mut r, chunk * 10_000 + i),
                memory_type: MemoryType::Semantic,
                category: None,
                tags: vec![],
                scope: if i % 4 == 0 {
                    MemoryScope::Agent("main".into())
                } else {
                    MemoryScope::Global
                },
                pinned: false,
                created_by: "bench".into(),
                confidence: None,
                taint: None,
                idempotency_key: None,
            })
            .collect();
        let vectors = (0..n)
            .map(|i| Some(vector((chunk * 10_000 + i) as u64)))
            .collect();
        rt.block_on(mem.bulk_insert(items, vectors))
            .map_err(|e| e.to_string())?;
    }
    for (label, mode) in [
        ("keyword", SearchMode::Keyword),
        ("hybrid 384-dim", SearchMode::Hybrid),
    ] {
        let (mut tp, mut p50, mut p99) = (Vec::new(), Vec::new(), Vec::new());
        for run in 0..runs {
            let mut qr = fastrand::Rng::with_seed(100 + run as u64);
            let mut lat = Vec::with_capacity(queries);
            let mut hits = 0usize;
            let started = Instant::now();
            for _ in 0..queries {
                let text = format!(
                    "what about {} and {} {}?",
                    word(vocab, &mut qr),
                    word(vocab, &mut qr),
                    word(vocab, &mut qr)
                );
                let q = MemoryQuery {
                    text,
                    limit: 8,
                    mode,
                    ..Default::default()
                };
                let t = Instant::now();
                let found = rt.block_on(mem.search(op, &q)).map_err(|e| e.to_string())?;
                lat.push(t.elapsed().as_secs_f64() * 1e6);
                hits += usize::from(!found.is_empty());
            }
            let row = stats(&mut lat, started.elapsed().as_secs_f64());
            if hits * 2 < queries {
                return Err(format!("only {hits} of {queries} queries found anything"));
            }
            tp.push(row.throughput_per_s);
            p50.push(row.p50_us);
            p99.push(row.p99_us);
        }
        rows.push(Row {
            name: label.into(),
            throughput_per_s: median(&mut tp),
            p50_us: median(&mut p50),
            p99_us: median(&mut p99),
            ..Row::default()
        });
    }
    Ok(rows)
}

pub fn run(quick: bool) -> Result<Report, String> {
    let sizes: &[usize] = if quick { &[10_000] } else { &[10_000, 100_000] };
    let queries = if quick { 200 } else { 500 };
    let runs = 3;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    let op = Viewer::operator();
    let vocab = vocabulary();
    // Store throughput: store() with dedup and embedding, one at a time.
    {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mem = SqliteMemory::open(&dir.path().join("m.db"), &Config::default())
            .map_err(|e| e.to_string())?
            .with_embedder(Arc::new(SeededEmbedder));
        let mut r = fastrand::Rng::with_seed(1);
        let n = if quick { 1_000 } else { 3_000 };
        let mut lat = Vec::with_capacity(n);
        let started = Instant::now();
        for i in 0..n {
            let m = NewMemory {
                content: sentence(&vocab, &mut r, i),
                memory_type: MemoryType::Semantic,
                category: None,
                tags: vec![],
                scope: MemoryScope::Global,
                pinned: false,
                created_by: "bench".into(),
                confidence: None,
                taint: None,
                idempotency_key: None,
            };
            let t = Instant::now();
            rt.block_on(mem.store(&op, m)).map_err(|e| e.to_string())?;
            lat.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let mut row = stats(&mut lat, started.elapsed().as_secs_f64());
        row.name = "store (dedup + vector)".into();
        rows.push(row);
    }
    let pg = crate::pg::url();
    let mut backends = vec!["SQLite"];
    if pg.is_some() {
        backends.push("PostgreSQL");
    }
    let mut p99_by: std::collections::BTreeMap<String, f64> = std::collections::BTreeMap::new();
    for &size in sizes {
        for backend in &backends {
            let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
            let schema = match *backend {
                "PostgreSQL" => pg.as_deref().map(|u| crate::pg::Schema::new(u, "memory")),
                _ => None,
            };
            let mem: Arc<dyn MemoryMaintenance> = match &schema {
                None => Arc::new(
                    SqliteMemory::open(&dir.path().join("m.db"), &Config::default())
                        .map_err(|e| e.to_string())?
                        .with_embedder(Arc::new(SeededEmbedder)),
                ),
                Some(sc) => {
                    let db = rt.block_on(sc.db(8))?;
                    Arc::new(
                        rt.block_on(strata_postgres::PgMemory::open(db, &Config::default()))
                            .map_err(|e| e.to_string())?
                            .with_embedder(Arc::new(SeededEmbedder)),
                    )
                }
            };
            let rows_here = recall(&rt, mem.as_ref(), &vocab, size, queries, runs, &op);
            if let Some(sc) = &schema {
                drop(mem);
                rt.block_on(sc.drop_now());
            }
            for mut row in rows_here? {
                let key = format!("{} @ {size}", row.name);
                match *backend {
                    "PostgreSQL" => {
                        if let Some(base) = p99_by.get(&key) {
                            row.extra
                                .insert("p99_ratio_postgres_to_sqlite".into(), row.p99_us / base);
                        }
                    }
                    _ => {
                        p99_by.insert(key.clone(), row.p99_us);
                    }
                }
                row.name = format!("{key}, {backend}");
                rows.push(row);
            }
        }
    }
    Ok(Report {
        bench: "memory",
        runs,
        calls_per_run: queries,
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        rows,
    })
}
