//! TLS to the server with rustls (the TLS stack already in the binary for HTTPS), honouring
//! the URL's `sslmode` as libpq does:
//!
//! - `disable`: plain TCP;
//! - `prefer` (the default) and `require`: encrypted; the certificate is not checked (as
//!   libpq does without a root certificate), so this stops eavesdropping, not impersonation;
//! - `verify-ca` and `verify-full`: encrypted, and the certificate must chain to
//!   `ca_file` (or, without one, the system's roots) and name the host.
//!
//! tokio-postgres knows only `disable | prefer | require`; the verifying modes are read here
//! and passed on as `require`. The glue to tokio-postgres is written here rather than taken
//! from `tokio-postgres-rustls`, which would add an X.509 stack (`x509-cert`, `der`, `spki`,
//! `tls_codec`, …) for channel binding; SCRAM authentication runs without channel binding
//! instead (libpq's `channel_binding=prefer` does the same when the server offers none).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};

/// How the certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// Encrypt only (`prefer`, `require`).
    None,
    /// Chain and host name (`verify-ca`, `verify-full`).
    Full,
}

/// Splits a verifying `sslmode` out of `url` (returning the URL with `sslmode=require` in
/// its place) so tokio-postgres can parse the rest.
pub fn split_sslmode(url: &str) -> (String, Verify) {
    for mode in ["verify-full", "verify-ca"] {
        let key = format!("sslmode={mode}");
        if url.contains(&key) {
            return (url.replace(&key, "sslmode=require"), Verify::Full);
        }
    }
    (url.to_owned(), Verify::None)
}

/// The connector for `verify`, trusting `ca_pem` (PEM certificates) when given.
pub fn connector(verify: Verify, ca_pem: Option<&[u8]>) -> Result<Tls, String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let config = match (verify, ca_pem) {
        (Verify::None, _) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(EncryptOnly(provider)))
            .with_no_client_auth(),
        (Verify::Full, Some(pem)) => {
            use rustls::pki_types::pem::PemObject;
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| format!("`ca_file`: not PEM certificates: {e}"))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("`ca_file`: unusable certificate: {e}"))?;
            }
            if roots.is_empty() {
                return Err("`ca_file` holds no certificate".into());
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        (Verify::Full, None) => {
            let v = rustls_platform_verifier::Verifier::new(provider)
                .map_err(|e| format!("TLS: the system's roots: {e}"))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(v))
                .with_no_client_auth()
        }
    };
    Ok(Tls(tokio_rustls::TlsConnector::from(Arc::new(config))))
}

/// Accepts any certificate but still checks that the server holds its key (the handshake
/// signatures): `sslmode=prefer|require`.
#[derive(Debug)]
struct EncryptOnly(Arc<CryptoProvider>);

impl ServerCertVerifier for EncryptOnly {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The `MakeTlsConnect` tokio-postgres calls for each connection.
#[derive(Clone)]
pub struct Tls(tokio_rustls::TlsConnector);

/// One connection's handshake.
pub struct Connect {
    connector: tokio_rustls::TlsConnector,
    name: ServerName<'static>,
}

/// A TLS stream to the server.
pub struct Stream<S>(tokio_rustls::client::TlsStream<S>);

impl<S> MakeTlsConnect<S> for Tls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type TlsConnect = Connect;
    type Error = rustls::pki_types::InvalidDnsNameError;

    fn make_tls_connect(&mut self, domain: &str) -> Result<Connect, Self::Error> {
        Ok(Connect {
            connector: self.0.clone(),
            name: ServerName::try_from(domain)?.to_owned(),
        })
    }
}

impl<S> TlsConnect<S> for Connect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Stream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move { self.connector.connect(self.name, stream).await.map(Stream) })
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> tokio_postgres::tls::TlsStream for Stream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Stream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Stream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifying_modes_become_require() {
        assert_eq!(
            split_sslmode("postgres://u@h/d?sslmode=verify-full"),
            ("postgres://u@h/d?sslmode=require".into(), Verify::Full)
        );
        assert_eq!(
            split_sslmode("postgres://u@h/d?application_name=x&sslmode=verify-ca"),
            (
                "postgres://u@h/d?application_name=x&sslmode=require".into(),
                Verify::Full
            )
        );
        assert_eq!(
            split_sslmode("postgres://u@h/d?sslmode=require"),
            ("postgres://u@h/d?sslmode=require".into(), Verify::None)
        );
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused() {
        let e = connector(Verify::Full, Some(b"not a certificate"))
            .err()
            .expect("refused");
        assert!(e.contains("ca_file"), "{e}");
    }
}
