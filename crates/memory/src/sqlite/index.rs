//! The in-memory vector index recall ranks against (contiguous f32, brute-force dot
//! products on unit vectors, scope filter on the written form).

#[allow(unused_imports)]
use super::*;

/// The in-memory copy of the vectors (brute-force cosine over unit vectors).
#[derive(Default)]
pub(super) struct VecIndex {
    dim: usize,
    mids: Vec<i64>,
    scopes: Vec<Arc<str>>,
    data: Vec<f32>,
    pos: HashMap<i64, usize>,
}

impl VecIndex {
    pub(super) fn insert(&mut self, mid: i64, scope: &str, v: &[f32]) {
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

    pub(super) fn remove(&mut self, mid: i64) {
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
    pub(super) fn top(
        &self,
        q: &[f32],
        k: usize,
        visible: impl Fn(&str) -> bool,
    ) -> Vec<(i64, f32)> {
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
