//! Coalescing: calls that arrive while others are on their way to the server go out together,
//! as one statement over arrays — what group commit is to SQLite's writer thread. A turn's
//! statement costs the server a parse, a plan and a commit whatever its size; under load,
//! one statement for many turns is most of the difference between a busy server and an idle
//! one. Alone, a call goes out at once (a batch of one): nothing waits for company.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use strata_engine::session::StoreError;
use tokio::sync::{Mutex, mpsc, oneshot};

type Job<Q, R> = (Q, oneshot::Sender<Result<R, StoreError>>);
type Run<Q, R> = dyn Fn(Vec<Q>) -> Pin<Box<dyn Future<Output = Vec<Result<R, StoreError>>> + Send>>
    + Send
    + Sync;

/// A queue of calls served by `workers` tasks, each taking up to `max` waiting calls at a
/// time and answering each with its own result.
pub(crate) struct Batcher<Q, R> {
    tx: mpsc::UnboundedSender<Job<Q, R>>,
}

impl<Q: Send + 'static, R: Send + 'static> Batcher<Q, R> {
    /// Starts the workers on the current runtime. `run` answers a batch with one result per
    /// call, in order.
    pub(crate) fn start<F, Fut>(workers: usize, max: usize, run: F) -> Self
    where
        F: Fn(Vec<Q>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<Result<R, StoreError>>> + Send + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel::<Job<Q, R>>();
        let rx = Arc::new(Mutex::new(rx));
        let run: Arc<Run<Q, R>> = Arc::new(move |b| Box::pin(run(b)));
        for _ in 0..workers.max(1) {
            let (rx, run) = (rx.clone(), run.clone());
            tokio::spawn(async move {
                loop {
                    // The worker holding the receiver takes the next call and whatever else
                    // is waiting; the others wait their turn for the next batch.
                    let jobs = {
                        let mut rx = rx.lock().await;
                        let Some(first) = rx.recv().await else {
                            return;
                        };
                        let mut jobs = vec![first];
                        while jobs.len() < max {
                            match rx.try_recv() {
                                Ok(j) => jobs.push(j),
                                Err(_) => break,
                            }
                        }
                        jobs
                    };
                    let (calls, answers): (Vec<Q>, Vec<_>) = jobs.into_iter().unzip();
                    let n = calls.len();
                    let mut results = run(calls).await.into_iter();
                    for a in answers {
                        let r = results.next().unwrap_or_else(|| {
                            Err(StoreError::Failed(format!("batch of {n} answered short")))
                        });
                        // The caller may have gone (its turn was cancelled): nothing to do.
                        let _ = a.send(r);
                    }
                }
            });
        }
        Batcher { tx }
    }

    /// Queues a call and waits for its answer.
    pub(crate) async fn call(&self, q: Q) -> Result<R, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send((q, tx))
            .map_err(|_| StoreError::Unavailable("the PostgreSQL writer has stopped".into()))?;
        rx.await.map_err(|_| {
            StoreError::Unavailable("the PostgreSQL writer stopped before answering".into())
        })?
    }
}
