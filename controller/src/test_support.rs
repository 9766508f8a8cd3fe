//! Test servers the outbound clients' tests share: an HTTP server on 127.0.0.1 (hyper)
//! that records each request and answers it with a closure, and the TLS acceptor of the
//! Prometheus tests' `server.crt` (signed by their `ca.crt`).

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// An answer's body.
pub(crate) type Body = BoxBody<Bytes, Infallible>;

/// The CA that signed [`tls_acceptor`]'s certificate (PEM).
pub(crate) const CA_PEM: &[u8] = include_bytes!("prometheus/testdata/ca.crt");
/// Another CA, which did not (PEM).
pub(crate) const OTHER_CA_PEM: &[u8] = include_bytes!("prometheus/testdata/other-ca.crt");

/// One request a test server received.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub method: hyper::Method,
    pub uri: hyper::Uri,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
}

/// Serves every connection on 127.0.0.1 with `answer`, which gets the request (its
/// whole body read); returns the base URL (`http://127.0.0.1:port`) and the requests
/// received, in order.
pub(crate) async fn serve<F, Fut>(answer: F) -> (String, mpsc::UnboundedReceiver<Seen>)
where
    F: Fn(Seen) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (seen, requests) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve_connection(stream, answer.clone(), seen.clone()));
        }
    });
    (format!("http://{address}"), requests)
}

/// Serves every connection on 127.0.0.1 over TLS ([`tls_acceptor`]) with `answer`;
/// returns the base URL (`https://127.0.0.1:port`) and the requests received.
pub(crate) async fn serve_tls<F, Fut>(answer: F) -> (String, mpsc::UnboundedReceiver<Seen>)
where
    F: Fn(Seen) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    let acceptor = tls_acceptor();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (seen, requests) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (acceptor, answer, seen) = (acceptor.clone(), answer.clone(), seen.clone());
            tokio::spawn(async move {
                if let Ok(stream) = acceptor.accept(stream).await {
                    serve_connection(stream, answer, seen).await;
                }
            });
        }
    });
    (format!("https://127.0.0.1:{}", address.port()), requests)
}

/// One connection's HTTP/1 exchanges.
async fn serve_connection<S, F, Fut>(stream: S, answer: F, seen: mpsc::UnboundedSender<Seen>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    F: Fn(Seen) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    let service = service_fn(move |request: Request<Incoming>| {
        let (answer, seen) = (answer.clone(), seen.clone());
        async move {
            let (parts, body) = request.into_parts();
            let body = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let request = Seen {
                method: parts.method,
                uri: parts.uri,
                headers: parts.headers,
                body,
            };
            let _ = seen.send(request.clone());
            Ok::<_, Infallible>(answer(request).await)
        }
    });
    let _ = http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// A server answering every request with `status` and `body` (as JSON).
pub(crate) async fn serve_fixed(
    status: StatusCode,
    body: &'static str,
) -> (String, mpsc::UnboundedReceiver<Seen>) {
    serve(move |_| async move { respond(status, body) }).await
}

/// `body` as an answer's body.
pub(crate) fn full(body: impl Into<Bytes>) -> Body {
    Full::new(body.into()).boxed()
}

/// An answer of `status` with `body`, as `application/json`.
pub(crate) fn respond(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(full(body))
        .unwrap()
}

/// A redirect of `status` to `location`, without a body.
pub(crate) fn redirect(status: StatusCode, location: &str) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("location", location)
        .body(full(""))
        .unwrap()
}

/// An answer whose head comes at once and whose chunked body never ends: spaces,
/// `chunk_bytes` at a time, as fast as they are read.
pub(crate) fn endless(chunk_bytes: usize) -> Response<Body> {
    let chunk = Bytes::from(vec![b' '; chunk_bytes]);
    let endless =
        futures::stream::repeat_with(move || Ok::<_, Infallible>(Frame::data(chunk.clone())));
    Response::new(StreamBody::new(endless).boxed())
}

/// An answer whose head comes at once and whose body is a space `every` interval,
/// forever.
pub(crate) fn trickle(every: Duration) -> Response<Body> {
    let trickle = futures::stream::unfold((), move |()| async move {
        tokio::time::sleep(every).await;
        Some((
            Ok::<_, Infallible>(Frame::data(Bytes::from_static(b" "))),
            (),
        ))
    });
    Response::new(StreamBody::new(trickle).boxed())
}

/// A TLS acceptor presenting `prometheus/testdata/server.crt`, valid for 127.0.0.1 and
/// signed by [`CA_PEM`].
pub(crate) fn tls_acceptor() -> tokio_rustls::TlsAcceptor {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let certificates =
        CertificateDer::pem_slice_iter(include_bytes!("prometheus/testdata/server.crt").as_slice())
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
    let key =
        PrivateKeyDer::from_pem_slice(include_bytes!("prometheus/testdata/server.key")).unwrap();
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certificates, key)
        .unwrap();
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}
