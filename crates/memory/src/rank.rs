//! Ranking shared by the memory backends that keep their vectors in process (SQLite here,
//! PostgreSQL in `strata-postgres`): the vector index, reciprocal rank fusion and the
//! `[MEMORY]` block.

use std::collections::HashMap;
use std::sync::Arc;

use strata_engine::memory::Memory;

use crate::text::dot;

/// The in-memory copy of the vectors (brute-force cosine over unit vectors), keyed by the
/// backend's row id.
#[derive(Default)]
pub struct VecIndex {
    dim: usize,
    mids: Vec<i64>,
    scopes: Vec<Arc<str>>,
    data: Vec<f32>,
    pos: HashMap<i64, usize>,
}

impl VecIndex {
    pub fn insert(&mut self, mid: i64, scope: &str, v: &[f32]) {
        if self.dim == 0 {
            self.dim = v.len();
        }
        if v.len() != self.dim {
            return; // a different embedder's vector: ignored until re-embedded
        }
        self.remove(mid);
        self.pos.insert(mid, self.mids.len());
        self.mids.push(mid);
        self.scopes.push(Arc::from(scope));
        self.data.extend_from_slice(v);
    }

    pub fn remove(&mut self, mid: i64) {
        let Some(i) = self.pos.remove(&mid) else {
            return;
        };
        let last = self.mids.len() - 1;
        if i != last {
            let moved = self.mids[last];
            self.mids.swap(i, last);
            self.scopes.swap(i, last);
            let (d, dim) = (&mut self.data, self.dim);
            for k in 0..dim {
                d.swap(i * dim + k, last * dim + k);
            }
            self.pos.insert(moved, i);
        }
        self.mids.pop();
        self.scopes.pop();
        self.data.truncate(last * self.dim);
    }

    /// The `k` best (mid, cosine) among entries whose scope passes `visible`.
    pub fn top(&self, q: &[f32], k: usize, visible: impl Fn(&str) -> bool) -> Vec<(i64, f32)> {
        if q.len() != self.dim || self.dim == 0 {
            return Vec::new();
        }
        let mut best: Vec<(i64, f32)> = Vec::with_capacity(k + 1);
        for (i, mid) in self.mids.iter().enumerate() {
            if !visible(&self.scopes[i]) {
                continue;
            }
            let s = dot(q, &self.data[i * self.dim..(i + 1) * self.dim]);
            if best.len() < k || best.last().is_some_and(|(_, b)| s > *b) {
                let at = best.partition_point(|(_, b)| *b >= s);
                best.insert(at, (*mid, s));
                best.truncate(k);
            }
        }
        best
    }
}

/// The `[MEMORY]` block for `items`, within `budget_chars`.
pub fn format_block(items: &[Memory], budget_chars: usize) -> Option<String> {
    let mut body = String::new();
    for m in items {
        let label = match &m.category {
            Some(c) => format!("{}/{c}", m.memory_type.as_str()),
            None => m.memory_type.as_str().to_owned(),
        };
        let pin = if m.pinned { ", pinned" } else { "" };
        let line = format!("- [{label}{pin}] {}\n", m.content.replace('\n', " "));
        if body.len() + line.len() > budget_chars {
            break;
        }
        body.push_str(&line);
    }
    (!body.is_empty()).then(|| format!("[MEMORY]\n{body}[/MEMORY]"))
}

/// Reciprocal rank fusion (k = 60) of two ranked lists.
pub fn rrf(a: Vec<(i64, Memory)>, b: Vec<(i64, Memory)>, limit: usize) -> Vec<(i64, Memory)> {
    const K: f64 = 60.0;
    let mut score: HashMap<i64, (f64, Memory)> = HashMap::new();
    for list in [a, b] {
        for (rank, (mid, m)) in list.into_iter().enumerate() {
            let e = score.entry(mid).or_insert((0.0, m));
            e.0 += 1.0 / (K + rank as f64 + 1.0);
        }
    }
    let mut v: Vec<(i64, f64, Memory)> = score.into_iter().map(|(k, (s, m))| (k, s, m)).collect();
    v.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
    v.into_iter().take(limit).map(|(k, _, m)| (k, m)).collect()
}
