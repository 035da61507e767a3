//! A request body bounded in size and in the time between two of its frames: what a handler
//! reads can never be more than the server's (or the handler's tighter) limit, and a client
//! that stops sending mid-body is cut off instead of holding a connection slot forever.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Bytes, Frame, Incoming, SizeHint};

/// Why reading a request body stopped.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// The client sent more than the limit (the server answers 413 itself when the
    /// `Content-Length` says so up front; this is the chunked / lying-length case).
    #[error("request body exceeds the limit of {limit} bytes")]
    TooLarge { limit: u64 },
    /// No frame arrived for this long.
    #[error("no request body bytes for {0:?}")]
    Idle(Duration),
    /// The connection failed or the framing was invalid.
    #[error("reading the request body: {0}")]
    Hyper(#[from] hyper::Error),
}

enum Inner {
    Incoming(Incoming),
    /// In-memory body, so that handlers can be unit-tested without a socket.
    Bytes(Option<Bytes>),
}

/// The body handed to a [`super::Handler`]. Implements [`hyper::body::Body`]; read it with
/// `http_body_util::BodyExt` (`collect`, `frame`).
pub struct Body {
    inner: Inner,
    limit: u64,
    remaining: u64,
    idle: Duration,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Body {
    pub(crate) fn incoming(b: Incoming, limit: u64, idle: Duration) -> Body {
        Body {
            inner: Inner::Incoming(b),
            limit,
            remaining: limit,
            idle,
            timer: None,
        }
    }

    /// A body of these bytes (tests of handlers). The size limit still applies.
    pub fn from_bytes(b: impl Into<Bytes>, limit: u64) -> Body {
        Body {
            inner: Inner::Bytes(Some(b.into())),
            limit,
            remaining: limit,
            idle: Duration::from_secs(3600),
            timer: None,
        }
    }

    /// Narrows the size limit for the rest of this body (a route that takes small
    /// manifests on a server whose default admits large uploads). Never widens it.
    pub fn limit(&mut self, max: u64) {
        self.remaining = self.remaining.min(max);
        self.limit = self.limit.min(max);
    }

    fn account(&mut self, n: usize) -> Result<(), BodyError> {
        let n = n as u64;
        if n > self.remaining {
            self.remaining = 0;
            return Err(BodyError::TooLarge { limit: self.limit });
        }
        self.remaining -= n;
        Ok(())
    }
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        let polled = match &mut this.inner {
            Inner::Bytes(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Inner::Incoming(i) => Pin::new(i).poll_frame(cx),
        };
        match polled {
            Poll::Ready(Some(Ok(frame))) => {
                this.timer = None;
                if let Some(d) = frame.data_ref() {
                    if let Err(e) = this.account(d.len()) {
                        return Poll::Ready(Some(Err(e)));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(BodyError::Hyper(e)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                let idle = this.idle;
                let t = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
                if t.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Some(Err(BodyError::Idle(idle))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::Bytes(b) => b.is_none(),
            Inner::Incoming(i) => i.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::Bytes(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Inner::Incoming(i) => i.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn an_in_memory_body_reads_back_and_respects_the_limit() {
        let b = Body::from_bytes("hello", 5);
        assert_eq!(&b.collect().await.unwrap().to_bytes()[..], b"hello");
        let mut b = Body::from_bytes("hello", 100);
        b.limit(4);
        assert!(matches!(
            b.collect().await,
            Err(BodyError::TooLarge { limit: 4 })
        ));
    }
}
