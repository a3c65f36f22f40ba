//! One connection to an upstream as the pool holds it: TCP, or TLS over TCP,
//! and the retirement signal of its address. Once no route table uses the
//! address, the connection reads as closed, so the pool drops it when idle
//! instead of keeping it for the idle timeout. Requests still in flight keep
//! the address in use, so they never see this.
//!
//! How a read learns of the retirement depends on who reads: hyper's
//! connection task waits on an idle connection's reads, so the signal must
//! wake it (a registration with the signal, under its lock, on every read);
//! the own exchange's pool never waits on an idle connection, it looks at
//! it when checking it out and when sweeping, so a read there only loads
//! the signal's flag.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::{Connected, Connection};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::tls::TlsConnection;
use crate::socket_io;
use crate::upstream::Retirement as Signal;

pub struct UpstreamConnection {
    stream: Stream,
    retirement: Retirement,
}

pub enum Stream {
    Tcp(TcpStream),
    Tls(Box<TlsConnection<TcpStream>>),
}

/// Who waits on a connection's reads while it is idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleReader {
    /// hyper's connection task: the retirement wakes it.
    Hyper,
    /// No one: the own exchange's pool looks at its idle connections.
    Pool,
}

/// The retirement signal of a connection's address, as its reads see it.
enum Retirement {
    /// The address is never retired (an SRV target's).
    Never,
    /// Looked at on each read.
    Looked(Signal),
    /// Looked at on each read, and wakes the read waiting.
    Woken(Pin<Box<WaitForCancellationFutureOwned>>),
}

impl UpstreamConnection {
    pub fn new(
        stream: Stream,
        retirement: Option<Signal>,
        idle_reader: IdleReader,
    ) -> UpstreamConnection {
        let retirement = match (retirement, idle_reader) {
            (None, _) => Retirement::Never,
            (Some(signal), IdleReader::Pool) => Retirement::Looked(signal),
            (Some(signal), IdleReader::Hyper) => {
                Retirement::Woken(Box::pin(signal.into_token().cancelled_owned()))
            }
        };
        UpstreamConnection { stream, retirement }
    }

    /// Whether a plain TCP connection, not retired, has nothing to read,
    /// asked without a waker (`socket_io::is_quiet`); `None` for the
    /// others, which are asked by a read (TLS may hold bytes of its own).
    pub fn is_quiet(&mut self) -> Option<bool> {
        match (&self.stream, &self.retirement) {
            (Stream::Tcp(tcp), Retirement::Never) => Some(socket_io::is_quiet(tcp)),
            (Stream::Tcp(tcp), Retirement::Looked(signal)) => {
                Some(!signal.is_raised() && socket_io::is_quiet(tcp))
            }
            _ => None,
        }
    }

    fn is_retired(&mut self, cx: &mut Context<'_>) -> bool {
        match &mut self.retirement {
            Retirement::Never => false,
            Retirement::Looked(signal) => signal.is_raised(),
            Retirement::Woken(retired) => retired.as_mut().poll(cx).is_ready(),
        }
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
            Stream::Tcp(tcp) => socket_io::poll_read(tcp, cx, buf),
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
            Stream::Tcp(tcp) => socket_io::poll_write(tcp, cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().stream {
            Stream::Tcp(tcp) => socket_io::poll_write_vectored(tcp, cx, bufs),
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
