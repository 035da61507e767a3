//! A client of the management API (k8ssandra's management-api-for-apache-cassandra), the
//! agent that runs Cassandra in every cass-operator pod: only the paths, methods and status
//! codes of its OpenAPI document (`../shared/third-party/management-api/openapi.json`,
//! management-api `dbc76292`), each call a typed answer.
//!
//! What the agent does that cleave relies on (management-api `LifecycleResources`,
//! `NodeOpsResources`, `K8OperatorResources`; summarised in `../shared/third-party/README.md`):
//! * `POST /api/v0/lifecycle/stop` sends SIGTERM (7 tries, 5 s apart), then SIGKILL; it
//!   does not drain, and keeps Cassandra stopped until `/lifecycle/start` is called
//!   (liveness stays 200 meanwhile, so the kubelet does not restart the container);
//! * `GET /api/v0/lifecycle/pid` is 204 when no Cassandra process runs;
//! * `POST /api/v0/lifecycle/start` answers 201 when it started Cassandra, 202/204/206 when
//!   one was already there, 420/500 when it could not;
//! * `GET /api/v0/probes/cluster?consistency_level=&rf_per_dc=` is 200 when every range
//!   can still reach that consistency with one node down;
//! * TLS, when on, is mutual: cass-operator's `managementApiAuth.manual` gives the client a
//!   certificate signed by the CA the agent trusts.
//!
//! One connection per call: a window makes a dozen calls, and a connection kept across a
//! Cassandra stop would only be a stale one.

use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::reason::{Failure, Reason};

pub mod ring;

/// The longest answer cleave reads (the ring of a large cluster is the largest: a few
/// hundred KiB for 256 vnodes on 100 nodes).
const MAX_ANSWER: usize = 8 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a call did not give its answer.
#[derive(Debug, thiserror::Error)]
pub enum MgmtError {
    #[error("management API at {addr}: {what}")]
    Unreachable { addr: String, what: String },
    #[error("management API {method} {path}: answered {status} ({body}); expected {expected}")]
    Unexpected {
        method: &'static str,
        path: String,
        status: u16,
        body: String,
        expected: &'static str,
    },
    #[error("management API {path}: {what}")]
    BadAnswer { path: String, what: String },
    #[error("--management-api: {0}")]
    Config(String),
}

impl From<MgmtError> for Failure {
    fn from(e: MgmtError) -> Failure {
        let reason = match e {
            MgmtError::Config(_) => Reason::InvalidRequest,
            _ => Reason::ManagementApiFailed,
        };
        Failure::new(reason, e.to_string())
    }
}

/// Where the agent listens: `http://host:port` (cass-operator's default, port 8080 inside
/// the pod) or `https://host:port` with the client configuration of the mutual TLS.
#[derive(Clone)]
pub struct Endpoint {
    addr: String,
    tls: Option<(
        std::sync::Arc<rustls::ClientConfig>,
        rustls_pki_types::ServerName<'static>,
    )>,
    /// Per call; `drain` and `stop` get their own (they wait for Cassandra).
    pub timeout: Duration,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}://{}",
            if self.tls.is_some() { "https" } else { "http" },
            self.addr
        )
    }
}

impl Endpoint {
    /// `url` is `http://host:port` or `https://host:port` (no path); `https` needs `tls`.
    pub fn parse(
        url: &str,
        tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    ) -> Result<Endpoint, MgmtError> {
        let (https, rest) = if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = url.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(MgmtError::Config(format!(
                "{url:?}: expected http://host:port or https://host:port"
            )));
        };
        let addr = rest.trim_end_matches('/');
        if addr.is_empty() || addr.contains('/') {
            return Err(MgmtError::Config(format!(
                "{url:?}: expected host:port without a path"
            )));
        }
        let addr = if addr
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            addr.to_string()
        } else {
            format!("{addr}:{}", if https { 443 } else { 80 })
        };
        let tls = match (https, tls) {
            (false, None) => None,
            (false, Some(_)) => {
                return Err(MgmtError::Config(format!(
                    "{url:?}: --management-api-ca is set, so the URL must be https://"
                )))
            }
            (true, None) => {
                return Err(MgmtError::Config(format!(
                    "{url:?}: https needs --management-api-ca (and the client certificate of the mutual TLS)"
                )))
            }
            (true, Some(cfg)) => {
                let host = addr
                    .rsplit_once(':')
                    .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']'))
                    .unwrap_or(&addr);
                let name = rustls_pki_types::ServerName::try_from(host.to_string())
                    .map_err(|e| MgmtError::Config(format!("{url:?}: server name: {e}")))?;
                Some((cfg, name))
            }
        };
        Ok(Endpoint {
            addr,
            tls,
            timeout: Duration::from_secs(30),
        })
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// An answer: its status code and (bounded) body.
struct Answer {
    status: u16,
    body: Bytes,
}

impl Answer {
    fn text(&self) -> String {
        let s = String::from_utf8_lossy(&self.body);
        let s = s.trim();
        match s.char_indices().nth(300) {
            Some((cut, _)) => format!("{}…", &s[..cut]),
            None => s.to_string(),
        }
    }
}

/// The management API of one Cassandra node.
#[derive(Clone, Debug)]
pub struct Client {
    pub endpoint: Endpoint,
}

/// What `/api/v0/lifecycle/start` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// 201: the agent started Cassandra.
    Started,
    /// 202 / 204 / 206: a Cassandra was already there (connectable or not).
    AlreadyRunning(u16),
    /// 420 / 500: it could not start; the agent's message.
    Failed(u16, String),
}

/// The cluster probe's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterHealth {
    /// 200: every range reaches the consistency level.
    Healthy,
    /// 500: the ranges that do not, as the agent lists them.
    Unhealthy(String),
}

/// One entry of `/api/v2/tokens/rangetoendpoint`: `(tokens[0], tokens[1]]` and its
/// replicas' addresses.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct RangeEndpoints {
    pub tokens: Vec<i64>,
    pub endpoints: Vec<String>,
}

#[derive(serde::Deserialize)]
struct RangeToEndpoint {
    token_range_to_endpoints: Vec<RangeEndpoints>,
}

#[derive(serde::Deserialize)]
struct EndpointStates {
    entity: Vec<std::collections::BTreeMap<String, String>>,
}

impl Client {
    pub fn new(endpoint: Endpoint) -> Client {
        Client { endpoint }
    }

    async fn connect(
        &self,
    ) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>, MgmtError> {
        let ep = &self.endpoint;
        let unreachable = |what: String| MgmtError::Unreachable {
            addr: ep.addr.clone(),
            what,
        };
        let tcp = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(&ep.addr))
            .await
            .map_err(|_| unreachable("connect: timed out".into()))?
            .map_err(|e| unreachable(format!("connect: {e}")))?;
        let _ = tcp.set_nodelay(true);
        let io: Box<dyn Io> = match &ep.tls {
            Some((cfg, name)) => Box::new(
                tokio_rustls::TlsConnector::from(cfg.clone())
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(|e| unreachable(format!("TLS handshake: {e}")))?,
            ),
            None => Box::new(tcp),
        };
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(|e| unreachable(format!("HTTP handshake: {e}")))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }

    /// One request, within `timeout`; any status is an answer (the caller knows which
    /// codes the contract gives).
    async fn call(
        &self,
        method: Method,
        path: &str,
        json: Option<serde_json::Value>,
        timeout: Duration,
    ) -> Result<Answer, MgmtError> {
        let addr = self.endpoint.addr.clone();
        let go = async {
            let mut conn = self.connect().await?;
            let mut b = Request::builder()
                .method(method.clone())
                .uri(path)
                .header("host", addr.as_str());
            let body = match json {
                Some(v) => {
                    b = b.header("content-type", "application/json");
                    Full::new(Bytes::from(v.to_string()))
                }
                None => Full::new(Bytes::new()),
            };
            let req = b
                .body(body)
                .map_err(|e| MgmtError::Config(format!("{path}: {e}")))?;
            let resp = conn
                .send_request(req)
                .await
                .map_err(|e| MgmtError::Unreachable {
                    addr: addr.clone(),
                    what: format!("{method} {path}: {e}"),
                })?;
            let status = resp.status().as_u16();
            let body = Limited::new(resp.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| MgmtError::Unreachable {
                    addr: addr.clone(),
                    what: format!("{method} {path}: reading the answer: {e}"),
                })?
                .to_bytes();
            Ok(Answer { status, body })
        };
        tokio::time::timeout(timeout, go)
            .await
            .map_err(|_| MgmtError::Unreachable {
                addr: self.endpoint.addr.clone(),
                what: format!("{path}: no answer within {} s", timeout.as_secs()),
            })?
    }

    fn unexpected(
        method: &'static str,
        path: &str,
        a: &Answer,
        expected: &'static str,
    ) -> MgmtError {
        MgmtError::Unexpected {
            method,
            path: path.to_string(),
            status: a.status,
            body: a.text(),
            expected,
        }
    }

    /// A call whose one success is `200`: its answer, or `Unexpected`.
    async fn ok200(
        &self,
        method: Method,
        path: &str,
        json: Option<serde_json::Value>,
        timeout: Duration,
    ) -> Result<Answer, MgmtError> {
        let name = if method == Method::POST {
            "POST"
        } else {
            "GET"
        };
        let a = self.call(method, path, json, timeout).await?;
        if a.status != 200 {
            return Err(Self::unexpected(name, path, &a, "200"));
        }
        Ok(a)
    }

    /// The JSON body of `a` as the document's `schema` (named in the error).
    fn json<T: serde::de::DeserializeOwned>(
        path: &str,
        a: &Answer,
        schema: &str,
    ) -> Result<T, MgmtError> {
        serde_json::from_slice(&a.body).map_err(|e| MgmtError::BadAnswer {
            path: path.to_string(),
            what: format!("not {schema}: {e}"),
        })
    }

    /// `GET /api/v0/metadata/versions/release`: the Cassandra release (`4.0.1`).
    pub async fn release_version(&self) -> Result<String, MgmtError> {
        let path = "/api/v0/metadata/versions/release";
        let a = self
            .ok200(Method::GET, path, None, self.endpoint.timeout)
            .await?;
        Ok(a.text())
    }

    /// `GET /api/v0/metadata/localdc`: this node's data center.
    pub async fn local_dc(&self) -> Result<String, MgmtError> {
        let path = "/api/v0/metadata/localdc";
        let a = self
            .ok200(Method::GET, path, None, self.endpoint.timeout)
            .await?;
        Ok(a.text())
    }

    /// `GET /api/v0/ops/keyspace/replication?keyspaceName=`: the replication factor of
    /// `keyspace` in `dc` (NetworkTopologyStrategy: the DC's entry; SimpleStrategy:
    /// `replication_factor`). `None` for a keyspace without replicas there.
    pub async fn replication_factor(
        &self,
        keyspace: &str,
        dc: &str,
    ) -> Result<Option<u32>, MgmtError> {
        let path = format!(
            "/api/v0/ops/keyspace/replication?keyspaceName={}",
            query_escape(keyspace)
        );
        let a = self
            .ok200(Method::GET, &path, None, self.endpoint.timeout)
            .await?;
        // The document types the answer as a JSON string holding the map; the agent sends
        // the map itself. Both are read.
        let v: serde_json::Value = Self::json(&path, &a, "JSON")?;
        let v = match v {
            serde_json::Value::String(s) => {
                serde_json::from_str(&s).map_err(|e| MgmtError::BadAnswer {
                    path: path.clone(),
                    what: format!("not a JSON map: {e}"),
                })?
            }
            v => v,
        };
        let map = v.as_object().ok_or_else(|| MgmtError::BadAnswer {
            path: path.clone(),
            what: "not a JSON map".into(),
        })?;
        let rf = map.get(dc).or_else(|| map.get("replication_factor"));
        match rf {
            None => Ok(None),
            Some(x) => {
                let n = match x {
                    serde_json::Value::String(s) => s.parse::<u32>().ok(),
                    serde_json::Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
                    _ => None,
                };
                n.map(Some).ok_or_else(|| MgmtError::BadAnswer {
                    path,
                    what: format!("replication factor {x} is not a count"),
                })
            }
        }
    }

    /// `GET /api/v0/probes/cluster?consistency_level=&rf_per_dc=`.
    pub async fn cluster_probe(
        &self,
        consistency: &str,
        rf_per_dc: u32,
    ) -> Result<ClusterHealth, MgmtError> {
        let path =
            format!("/api/v0/probes/cluster?consistency_level={consistency}&rf_per_dc={rf_per_dc}");
        let a = self
            .call(Method::GET, &path, None, self.endpoint.timeout)
            .await?;
        match a.status {
            200 => Ok(ClusterHealth::Healthy),
            500 => Ok(ClusterHealth::Unhealthy(a.text())),
            _ => Err(Self::unexpected("GET", &path, &a, "200 or 500")),
        }
    }

    /// `POST /api/v0/ops/tables/flush` (synchronous; `jobs: 0` lets Cassandra choose).
    pub async fn flush(
        &self,
        keyspace: &str,
        tables: &[String],
        timeout: Duration,
    ) -> Result<(), MgmtError> {
        let path = "/api/v0/ops/tables/flush";
        let body = serde_json::json!({ "keyspace_name": keyspace, "tables": tables, "jobs": 0 });
        self.ok200(Method::POST, path, Some(body), timeout).await?;
        Ok(())
    }

    /// `POST /api/v0/ops/node/drain`: flush everything, stop accepting writes (what
    /// cass-operator's preStop hook does before a pod is deleted).
    pub async fn drain(&self, timeout: Duration) -> Result<(), MgmtError> {
        let path = "/api/v0/ops/node/drain";
        self.ok200(Method::POST, path, None, timeout).await?;
        Ok(())
    }

    /// `POST /api/v0/lifecycle/stop`.
    pub async fn stop(&self, timeout: Duration) -> Result<(), MgmtError> {
        let path = "/api/v0/lifecycle/stop";
        self.ok200(Method::POST, path, None, timeout).await?;
        Ok(())
    }

    /// `GET /api/v0/lifecycle/pid`: the running Cassandra's pid, `None` on 204.
    pub async fn pid(&self) -> Result<Option<String>, MgmtError> {
        let path = "/api/v0/lifecycle/pid";
        let a = self
            .call(Method::GET, path, None, self.endpoint.timeout)
            .await?;
        match a.status {
            200 => Ok(Some(a.text())),
            204 => Ok(None),
            _ => Err(Self::unexpected("GET", path, &a, "200 or 204")),
        }
    }

    /// `POST /api/v0/lifecycle/start`.
    pub async fn start(&self, timeout: Duration) -> Result<Start, MgmtError> {
        let path = "/api/v0/lifecycle/start";
        let a = self.call(Method::POST, path, None, timeout).await?;
        match a.status {
            201 => Ok(Start::Started),
            202 | 204 | 206 => Ok(Start::AlreadyRunning(a.status)),
            420 | 500 => Ok(Start::Failed(a.status, a.text())),
            _ => Err(Self::unexpected(
                "POST",
                path,
                &a,
                "201, 202, 204, 206, 420 or 500",
            )),
        }
    }

    /// `GET /api/v0/probes/readiness`: true on 200, false on 500.
    pub async fn ready(&self) -> Result<bool, MgmtError> {
        let path = "/api/v0/probes/readiness";
        let a = self
            .call(Method::GET, path, None, self.endpoint.timeout)
            .await?;
        match a.status {
            200 => Ok(true),
            500 => Ok(false),
            _ => Err(Self::unexpected("GET", path, &a, "200 or 500")),
        }
    }

    /// `GET /api/v0/metadata/endpoints`: the gossip state of every endpoint as this node
    /// sees it (`ENDPOINT_IP`, `STATUS`, `IS_LOCAL`, …).
    pub async fn endpoints(
        &self,
    ) -> Result<Vec<std::collections::BTreeMap<String, String>>, MgmtError> {
        let path = "/api/v0/metadata/endpoints";
        let a = self
            .ok200(Method::GET, path, None, self.endpoint.timeout)
            .await?;
        let e: EndpointStates = Self::json(path, &a, "EndpointStates")?;
        Ok(e.entity)
    }

    /// `GET /api/v2/tokens/rangetoendpoint?keyspaceName=`: the ring of `keyspace`.
    pub async fn range_to_endpoint(
        &self,
        keyspace: &str,
    ) -> Result<Vec<RangeEndpoints>, MgmtError> {
        let path = format!(
            "/api/v2/tokens/rangetoendpoint?keyspaceName={}",
            query_escape(keyspace)
        );
        let a = self
            .ok200(Method::GET, &path, None, self.endpoint.timeout)
            .await?;
        let r: RangeToEndpoint = Self::json(&path, &a, "TokenRangeToEndpointResponse")?;
        Ok(r.token_range_to_endpoints)
    }
}

/// Percent-encodes a query value (keyspace names are `\w+`, but a spec is user input).
fn query_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            o.push(b as char);
        } else {
            o.push_str(&format!("%{b:02X}"));
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_and_refuse() {
        let e = Endpoint::parse("http://localhost:8080", None).expect("plain URL");
        assert_eq!(format!("{e:?}"), "http://localhost:8080");
        let e = Endpoint::parse("http://10.0.0.1/", None).expect("default port");
        assert_eq!(format!("{e:?}"), "http://10.0.0.1:80");
        for bad in [
            "localhost:8080",
            "ftp://x:1",
            "http://x:1/api",
            "http://",
            "https://x:1",
        ] {
            assert!(
                matches!(Endpoint::parse(bad, None), Err(MgmtError::Config(_))),
                "{bad} accepted"
            );
        }
    }

    #[test]
    fn query_values_are_escaped() {
        assert_eq!(query_escape("ks_1"), "ks_1");
        assert_eq!(query_escape("a b&c"), "a%20b%26c");
    }
}
