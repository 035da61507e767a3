//! Handlers and a path router: exact paths (`/metrics`) and prefixes (`/v1/transfers/*`),
//! matched on the path only (a query string never changes the route), with 404 for an
//! unknown path and 405 + `Allow` for a known path and a wrong method. `HEAD` is answered by
//! the `GET` handler (hyper sends no body for a HEAD request).

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{header, Method, StatusCode};

use super::{BoxError, Request, Response};

/// Something that answers a request. Closures `Fn(Request) -> impl Future<Output = Response>`
/// are handlers; so is a [`Router`].
pub trait Handler: Send + Sync + 'static {
    fn call(&self, req: Request) -> BoxFuture<'static, Response>;
}

impl<F, Fut> Handler for F
where
    F: Fn(Request) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response> + Send + 'static,
{
    fn call(&self, req: Request) -> BoxFuture<'static, Response> {
        Box::pin(self(req))
    }
}

enum Pattern {
    Exact(String),
    /// `"/a/*"` matches `/a/` and everything below it.
    Prefix(String),
}

impl Pattern {
    fn parse(p: &str) -> Pattern {
        match p.strip_suffix('*') {
            Some(prefix) => Pattern::Prefix(prefix.to_string()),
            None => Pattern::Exact(p.to_string()),
        }
    }

    fn matches(&self, path: &str) -> bool {
        match self {
            Pattern::Exact(p) => p == path,
            Pattern::Prefix(p) => path.starts_with(p.as_str()),
        }
    }
}

struct Route {
    pattern: Pattern,
    method: Method,
    handler: Arc<dyn Handler>,
}

/// Routes by path, then method. The first matching route wins.
#[derive(Default)]
pub struct Router {
    routes: Vec<Route>,
}

impl Router {
    pub fn new() -> Router {
        Router::default()
    }

    /// Adds a route. `path` is exact, or a prefix when it ends in `*`.
    pub fn route(mut self, method: Method, path: &str, handler: impl Handler) -> Router {
        self.routes.push(Route {
            pattern: Pattern::parse(path),
            method,
            handler: Arc::new(handler),
        });
        self
    }

    /// `GET` (and `HEAD`).
    pub fn get(self, path: &str, handler: impl Handler) -> Router {
        self.route(Method::GET, path, handler)
    }

    pub fn post(self, path: &str, handler: impl Handler) -> Router {
        self.route(Method::POST, path, handler)
    }

    pub fn put(self, path: &str, handler: impl Handler) -> Router {
        self.route(Method::PUT, path, handler)
    }
}

impl Handler for Router {
    fn call(&self, req: Request) -> BoxFuture<'static, Response> {
        let path = req.uri().path();
        let method = req.method();
        let mut allowed: Vec<&Method> = Vec::new();
        for r in self.routes.iter().filter(|r| r.pattern.matches(path)) {
            if r.method == method || (method == Method::HEAD && r.method == Method::GET) {
                return r.handler.call(req);
            }
            allowed.push(&r.method);
        }
        let resp = if allowed.is_empty() {
            text(StatusCode::NOT_FOUND, "not found\n")
        } else {
            if allowed.contains(&&Method::GET) {
                allowed.push(&Method::HEAD);
            }
            let allow = allowed
                .iter()
                .map(|m| m.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
            if let Ok(v) = header::HeaderValue::from_str(&allow) {
                r.headers_mut().insert(header::ALLOW, v);
            }
            r
        };
        Box::pin(async move { resp })
    }
}

/// A complete response with a content type.
pub fn full(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response {
    let mut r = hyper::Response::new(
        Full::new(body.into())
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    r
}

/// A `text/plain` response.
pub fn text(status: StatusCode, body: impl Into<String>) -> Response {
    full(status, "text/plain; charset=utf-8", body.into())
}

/// A response whose body is produced as it is sent (large downloads).
pub fn streaming<B>(status: StatusCode, content_type: &'static str, body: B) -> Response
where
    B: hyper::body::Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: Into<BoxError>,
{
    let mut r = hyper::Response::new(body.map_err(Into::into).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::super::Body;
    use super::*;

    fn req(method: Method, uri: &str) -> Request {
        hyper::Request::builder()
            .method(method)
            .uri(uri)
            .body(Body::from_bytes("", 0))
            .unwrap()
    }

    fn router() -> Router {
        Router::new()
            .get("/metrics", |_r: Request| async {
                text(StatusCode::OK, "m")
            })
            .post("/v1/t/*", |r: Request| async move {
                text(StatusCode::OK, r.uri().path().to_string())
            })
    }

    async fn body(r: Response) -> String {
        String::from_utf8(r.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
    }

    #[tokio::test]
    async fn query_strings_do_not_change_the_route() {
        let r = router().call(req(Method::GET, "/metrics?x=1&y")).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(body(r).await, "m");
    }

    #[tokio::test]
    async fn a_wrong_method_is_405_with_allow_an_unknown_path_404() {
        let r = router().call(req(Method::POST, "/metrics")).await;
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(r.headers()[header::ALLOW], "GET, HEAD");
        let r = router().call(req(Method::GET, "/nope")).await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        let r = router().call(req(Method::HEAD, "/metrics")).await;
        assert_eq!(r.status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn prefix_routes_see_the_whole_path() {
        let r = router().call(req(Method::POST, "/v1/t/abc/files/x")).await;
        assert_eq!(body(r).await, "/v1/t/abc/files/x");
        let r = router().call(req(Method::GET, "/v1/t/abc")).await;
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    }
}
