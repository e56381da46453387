//! The PostgreSQL server the storage benches compare against: `STRATA_BENCH_POSTGRES_URL`,
//! default `postgres://postgres@127.0.0.1:5432/test`. Without one answering, the
//! PostgreSQL rows are left out (and say so). Each run gets a schema of its own, dropped after.

use std::sync::Arc;

/// The server's URL, if one answers.
pub fn url() -> Option<String> {
    let url = std::env::var("STRATA_BENCH_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let addr = url
        .split_once('@')
        .map_or(url.as_str(), |(_, r)| r)
        .split(['/', '?'])
        .next()
        .unwrap_or("127.0.0.1:5432")
        .to_owned();
    let ok = answers(&addr);
    if !ok {
        eprintln!(
            "no PostgreSQL at {addr}: PostgreSQL rows skipped (set STRATA_BENCH_POSTGRES_URL)"
        );
    }
    ok.then_some(url)
}

/// Whether something accepts a TCP connection at `addr` (`host:port`) within two seconds.
pub fn answers(addr: &str) -> bool {
    std::net::ToSocketAddrs::to_socket_addrs(addr)
        .ok()
        .and_then(|mut a| a.next())
        .is_some_and(|a| {
            std::net::TcpStream::connect_timeout(&a, std::time::Duration::from_secs(2)).is_ok()
        })
}

/// A fresh schema on the server; dropped with [`Schema::drop_now`].
pub struct Schema {
    pub url: String,
    pub name: String,
}

impl Schema {
    pub fn new(url: &str, tag: &str) -> Schema {
        Schema {
            url: url.to_owned(),
            name: format!("bench_{tag}_{}", fastrand::u64(..)),
        }
    }

    pub fn config(&self, pool_size: usize) -> strata_engine::config::PostgresConfig {
        strata_engine::config::PostgresConfig {
            url: Some(self.url.clone()),
            schema: self.name.clone(),
            pool_size,
            ..Default::default()
        }
    }

    pub async fn db(&self, pool_size: usize) -> Result<Arc<strata_postgres::Db>, String> {
        strata_postgres::Db::connect(&self.url, &self.config(pool_size))
            .await
            .map(Arc::new)
            .map_err(|e| e.to_string())
    }

    pub async fn drop_now(&self) {
        if let Ok((c, conn)) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls).await {
            tokio::spawn(conn);
            let _ = c
                .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name))
                .await;
        }
    }
}
