//! One connection to an upstream as the pool holds it: TCP, or TLS over TCP,
//! and the retirement signal of its address. Once no route table uses the
//! address, the connection reads as closed, so the pool drops it when idle
//! instead of keeping it for the idle timeout. Requests still in flight keep
//! the address in use, so they never see this.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::{Connected, Connection};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::tls::TlsConnection;

pub struct UpstreamConnection {
    stream: Stream,
    retired: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
}

pub enum Stream {
    Tcp(TcpStream),
    Tls(Box<TlsConnection<TcpStream>>),
}

impl UpstreamConnection {
    pub fn new(stream: Stream, retirement: Option<CancellationToken>) -> UpstreamConnection {
        UpstreamConnection {
            stream,
            retired: retirement.map(|token| Box::pin(token.cancelled_owned())),
        }
    }

    fn is_retired(&mut self, cx: &mut Context<'_>) -> bool {
        self.retired
            .as_mut()
            .is_some_and(|retired| retired.as_mut().poll(cx).is_ready())
    }
}

impl Connection for UpstreamConnection {
    fn connected(&self) -> Connected {
        match &self.stream {
            Stream::Tcp(tcp) => tcp.connected(),
            Stream::Tls(tls) => tls.connected(),
        }
    }
}

impl AsyncRead for UpstreamConnection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.is_retired(cx) {
            // End of stream: the pool closes the connection.
            return Poll::Ready(Ok(()));
        }
        match &mut this.stream {
            Stream::Tcp(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for UpstreamConnection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().stream {
            Stream::Tcp(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().stream {
            Stream::Tcp(tcp) => Pin::new(tcp).poll_write_vectored(cx, bufs),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.stream {
            Stream::Tcp(tcp) => tcp.is_write_vectored(),
            Stream::Tls(tls) => tls.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Tcp(tcp) => Pin::new(tcp).poll_flush(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Tcp(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}
