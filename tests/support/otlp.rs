//! An OTLP receiver for tests: OTLP/HTTP (protobuf) and OTLP/gRPC on loopback, every span
//! it receives decoded with `opentelemetry-proto` and kept, with the span tree printer the
//! trace tests show their scenario with.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message as _;

/// One span as the receiver got it, ids in hex.
#[derive(Debug, Clone)]
pub struct Span {
    /// Trace id.
    pub trace_id: String,
    /// Span id.
    pub span_id: String,
    /// Parent span id (empty for a root).
    pub parent_span_id: String,
    /// Name.
    pub name: String,
    /// Kind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer.
    pub kind: i32,
    /// Attributes, values as text.
    pub attributes: BTreeMap<String, String>,
    /// Links: trace id, span id and the link's attributes.
    pub links: Vec<(String, String, BTreeMap<String, String>)>,
    /// Status code: 0 unset, 1 ok, 2 error.
    pub status: i32,
    /// The resource's `service.name`.
    pub service: String,
    /// `http` or `grpc`: how it arrived.
    pub transport: &'static str,
    /// Start, ns since the epoch.
    pub start_ns: u64,
}

/// Span kinds as OTLP numbers them.
pub mod kind {
    /// Internal.
    pub const INTERNAL: i32 = 1;
    /// Client.
    pub const CLIENT: i32 = 3;
    /// Producer.
    pub const PRODUCER: i32 = 4;
    /// Consumer.
    pub const CONSUMER: i32 = 5;
}

type Spans = Arc<Mutex<Vec<Span>>>;

/// A running receiver; stops with its runtime.
pub struct Receiver {
    /// OTLP/HTTP base URL (`http://127.0.0.1:<port>`; spans are posted to `/v1/traces`).
    pub http_url: String,
    /// OTLP/gRPC URL.
    pub grpc_url: String,
    spans: Spans,
    /// Headers of every HTTP export, for tests of what an export carries.
    pub export_headers: Arc<Mutex<Vec<BTreeMap<String, String>>>>,
}

fn text(value: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn attributes(
    list: &[opentelemetry_proto::tonic::common::v1::KeyValue],
) -> BTreeMap<String, String> {
    list.iter()
        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Keep every span of `request`.
fn keep(spans: &Spans, request: ExportTraceServiceRequest, transport: &'static str) {
    let mut kept = spans.lock().unwrap();
    for resource in request.resource_spans {
        let service = resource
            .resource
            .as_ref()
            .map(|r| attributes(&r.attributes))
            .and_then(|a| a.get("service.name").cloned())
            .unwrap_or_default();
        for scope in resource.scope_spans {
            for s in scope.spans {
                kept.push(Span {
                    trace_id: hex(&s.trace_id),
                    span_id: hex(&s.span_id),
                    parent_span_id: hex(&s.parent_span_id),
                    name: s.name,
                    kind: s.kind,
                    attributes: attributes(&s.attributes),
                    links: s
                        .links
                        .iter()
                        .map(|l| (hex(&l.trace_id), hex(&l.span_id), attributes(&l.attributes)))
                        .collect(),
                    status: s.status.map_or(0, |st| st.code),
                    service: service.clone(),
                    transport,
                    start_ns: s.start_time_unix_nano,
                });
            }
        }
    }
}

struct Grpc(Spans);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        keep(&self.0, request.into_inner(), "grpc");
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// A TLS connection the gRPC server serves.
struct TlsConnection(tokio_rustls::server::TlsStream<tokio::net::TcpStream>);

impl tonic::transport::server::Connected for TlsConnection {
    type ConnectInfo = ();
    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl tokio::io::AsyncRead for TlsConnection {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for TlsConnection {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl Receiver {
    /// Start both listeners on `runtime`, in plaintext.
    pub fn start(runtime: &tokio::runtime::Runtime) -> Receiver {
        Self::start_with(runtime, None)
    }

    /// Start both listeners on `runtime`, over TLS with `tls` (its URLs `https://`): the
    /// gRPC one agrees on HTTP/2 in the handshake.
    pub fn start_tls(
        runtime: &tokio::runtime::Runtime,
        tls: Arc<rustls::ServerConfig>,
    ) -> Receiver {
        Self::start_with(runtime, Some(tls))
    }

    fn start_with(
        runtime: &tokio::runtime::Runtime,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> Receiver {
        let spans: Spans = Arc::default();
        let export_headers: Arc<Mutex<Vec<BTreeMap<String, String>>>> = Arc::default();
        let http = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("binding the OTLP/HTTP receiver");
        let http_addr = http.local_addr().unwrap();
        let (kept, headers_kept) = (spans.clone(), export_headers.clone());
        let router = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(
                move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                    let (kept, headers_kept) = (kept.clone(), headers_kept.clone());
                    async move {
                        headers_kept.lock().unwrap().push(
                            headers
                                .iter()
                                .map(|(k, v)| {
                                    (k.to_string(), v.to_str().unwrap_or_default().to_string())
                                })
                                .collect(),
                        );
                        match ExportTraceServiceRequest::decode(body) {
                            Ok(request) => {
                                keep(&kept, request, "http");
                                (
                                    axum::http::StatusCode::OK,
                                    ExportTraceServiceResponse::default().encode_to_vec(),
                                )
                            }
                            Err(_) => (axum::http::StatusCode::BAD_REQUEST, Vec::new()),
                        }
                    }
                },
            ),
        );
        match &tls {
            None => {
                runtime.spawn(async move { axum::serve(http, router).await });
            }
            Some(tls) => {
                let _runtime = runtime.enter();
                let listener =
                    verdict_gateway::admin::tls::TlsListener::new(http, tls.clone()).unwrap();
                runtime.spawn(async move { axum::serve(listener, router).await });
            }
        }
        let grpc = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("binding the OTLP/gRPC receiver");
        let grpc_addr: SocketAddr = grpc.local_addr().unwrap();
        let service = TraceServiceServer::new(Grpc(spans.clone()));
        let scheme = if tls.is_some() { "https" } else { "http" };
        match tls {
            None => {
                runtime.spawn(async move {
                    tonic::transport::Server::builder()
                        .add_service(service)
                        .serve_with_incoming(tokio_stream_of(grpc))
                        .await
                });
            }
            Some(tls) => {
                let mut h2 = rustls::ServerConfig::clone(&tls);
                h2.alpn_protocols = vec![b"h2".to_vec()];
                let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(h2));
                let incoming =
                    futures_util::StreamExt::filter_map(tokio_stream_of(grpc), move |tcp| {
                        let acceptor = acceptor.clone();
                        async move {
                            // A handshake that fails is that client's problem, not the server's.
                            acceptor
                                .accept(tcp.ok()?)
                                .await
                                .ok()
                                .map(|s| Ok::<_, std::io::Error>(TlsConnection(s)))
                        }
                    });
                runtime.spawn(async move {
                    tonic::transport::Server::builder()
                        .add_service(service)
                        .serve_with_incoming(incoming)
                        .await
                });
            }
        }
        // A certificate names a host; plaintext keeps to the address.
        let host = if scheme == "https" {
            "localhost"
        } else {
            "127.0.0.1"
        };
        Receiver {
            http_url: format!("{scheme}://{host}:{}", http_addr.port()),
            grpc_url: format!("{scheme}://{host}:{}", grpc_addr.port()),
            spans,
            export_headers,
        }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }

    /// Wait (up to `limit`) until `done` holds for the spans received; they are returned
    /// either way.
    pub fn wait_for(&self, limit: Duration, done: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let until = Instant::now() + limit;
        loop {
            let spans = self.spans();
            if done(&spans) || Instant::now() > until {
                return spans;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The connections a listener accepts, as the stream tonic serves.
fn tokio_stream_of(
    listener: tokio::net::TcpListener,
) -> impl futures_util::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures_util::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.map(|(stream, _)| stream);
        Some((accepted, listener))
    })
}

/// The spans of `trace_id` as an indented tree (children by start time), each line the
/// span's name, kind and the attributes named in `shown`; spans of other traces that link
/// into this one are listed after it.
pub fn tree(spans: &[Span], trace_id: &str, shown: &[&str]) -> String {
    let of_trace: Vec<&Span> = spans.iter().filter(|s| s.trace_id == trace_id).collect();
    let mut out = String::new();
    fn kind_name(kind: i32) -> &'static str {
        match kind {
            1 => "INTERNAL",
            2 => "SERVER",
            3 => "CLIENT",
            4 => "PRODUCER",
            5 => "CONSUMER",
            _ => "UNSPECIFIED",
        }
    }
    fn walk(out: &mut String, all: &[&Span], parent: &str, depth: usize, shown: &[&str]) {
        let mut children: Vec<&&Span> = all.iter().filter(|s| s.parent_span_id == parent).collect();
        children.sort_by_key(|s| s.start_ns);
        for s in children {
            let attrs: Vec<String> = shown
                .iter()
                .filter_map(|k| s.attributes.get(*k).map(|v| format!("{k}={v}")))
                .collect();
            let links = if s.links.is_empty() {
                String::new()
            } else {
                format!(
                    " links=[{}]",
                    s.links
                        .iter()
                        .map(|(t, sp, a)| format!(
                            "{}{}/{}",
                            a.get("verdict.link")
                                .map(|r| format!("{r}:"))
                                .unwrap_or_default(),
                            &t[..8],
                            &sp[..8]
                        ))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            let line = format!(
                "{}{} [{}] {}{}",
                "  ".repeat(depth),
                s.name,
                kind_name(s.kind),
                attrs.join(" "),
                links
            );
            out.push_str(line.trim_end());
            out.push('\n');
            walk(out, all, &s.span_id, depth + 1, shown);
        }
    }
    // Roots: no parent, or a parent outside what was received (the producer's span).
    let ids: std::collections::BTreeSet<&str> =
        of_trace.iter().map(|s| s.span_id.as_str()).collect();
    let mut parents: Vec<&str> = of_trace
        .iter()
        .filter(|s| !ids.contains(s.parent_span_id.as_str()))
        .map(|s| s.parent_span_id.as_str())
        .collect();
    parents.sort();
    parents.dedup();
    for parent in parents {
        if !parent.is_empty() {
            out.push_str(&format!(
                "(producer span {})\n",
                &parent[..8.min(parent.len())]
            ));
        }
        walk(
            &mut out,
            &of_trace,
            parent,
            usize::from(!parent.is_empty()),
            shown,
        );
    }
    out
}
