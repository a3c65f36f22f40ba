//! `--client-send-timeout`: the client's socket as the server uses it, which
//! cuts a client that accepts no bytes for the timeout while dockhand has
//! bytes for it. A client that stops reading would otherwise hold its
//! response's buffers and its upstream connection for as long as it likes.
//!
//! Only a write that finds the socket full arms the timer (made at the
//! first stall, reset at later ones); every write that goes through
//! disarms it, so a client that reads costs no timer at all. The cut resets
//! the connection (what the kernel still holds for the client is dropped),
//! and the connection's requests still being answered log why they ended.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{sleep_until, Instant, Sleep};

/// Whether a client connection was cut for not reading; shared by the
/// connection's socket and the access-log records of its requests.
#[derive(Debug)]
pub struct ClientCut {
    timeout: Duration,
    cut: AtomicBool,
}

impl ClientCut {
    pub fn new(timeout: Duration) -> ClientCut {
        ClientCut {
            timeout,
            cut: AtomicBool::new(false),
        }
    }

    pub fn is_cut(&self) -> bool {
        self.cut.load(Ordering::Relaxed)
    }

    /// Why the connection was cut, for the log.
    pub fn cause(&self) -> String {
        format!(
            "the client accepted no bytes for {:?} (--client-send-timeout)",
            self.timeout
        )
    }
}

/// A client's TCP connection whose writes fail once the client has accepted
/// nothing for the send timeout.
pub struct ClientSocket {
    stream: TcpStream,
    cut: Arc<ClientCut>,
    /// When the current stall ends the connection; `None` until the first stall.
    deadline: Option<Pin<Box<Sleep>>>,
    /// Whether the last write found the socket full.
    stalled: bool,
}

impl ClientSocket {
    pub fn new(stream: TcpStream, cut: Arc<ClientCut>) -> ClientSocket {
        ClientSocket {
            stream,
            cut,
            deadline: None,
            stalled: false,
        }
    }

    /// After a write found the socket full: arms the timer if this stall
    /// is new, and cuts the connection once it runs out.
    fn stall<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        if !self.stalled {
            self.stalled = true;
            let end = Instant::now() + self.cut.timeout;
            match &mut self.deadline {
                Some(deadline) => deadline.as_mut().reset(end),
                None => self.deadline = Some(Box::pin(sleep_until(end))),
            }
        }
        let deadline = self.deadline.as_mut().expect("armed above");
        ready!(deadline.as_mut().poll(cx));
        self.cut.cut.store(true, Ordering::Relaxed);
        tracing::debug!(peer = ?self.stream.peer_addr().ok(), "{}", self.cut.cause());
        // Closed with a reset: the bytes it would not take are dropped
        // instead of being kept for it by the kernel.
        if let Err(error) = self.stream.set_zero_linger() {
            tracing::debug!(%error, "SO_LINGER not set");
        }
        Poll::Ready(Err(self.cut_error()))
    }

    fn cut_error(&self) -> io::Error {
        io::Error::new(io::ErrorKind::TimedOut, self.cut.cause())
    }

    /// A write's outcome: anything but `Pending` ends a stall.
    fn wrote(
        &mut self,
        cx: &mut Context<'_>,
        written: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match written {
            Poll::Pending => self.stall(cx),
            done => {
                self.stalled = false;
                done
            }
        }
    }
}

impl AsyncRead for ClientSocket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for ClientSocket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.cut.is_cut() {
            return Poll::Ready(Err(this.cut_error()));
        }
        let written = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.wrote(cx, written)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.cut.is_cut() {
            return Poll::Ready(Err(this.cut_error()));
        }
        let written = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.wrote(cx, written)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
