//! `--client-send-timeout`: the client's socket as the server uses it, which
//! cuts a client that accepts no bytes for the timeout while dockhand has
//! bytes for it. A client that stops reading would otherwise hold its
//! response's buffers and its upstream connection for as long as it likes.
//!
//! Only a write that finds the socket full arms the timer (made at the
//! first stall, reset at later ones); every write that goes through
//! disarms it, so a client that reads costs no timer at all. The kernel
//! keeps at most `UNSENT_BYTES` not yet sent, so a write finds room as soon
//! as the client reads some. The cut resets the connection (what the kernel
//! still holds for the client is dropped), and the connection's requests
//! still being answered log why they ended.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use socket2::SockRef;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{sleep_until, Instant, Sleep};

use crate::socket_io;

/// What the kernel may hold of a client's responses beyond what is on its
/// way to it (`TCP_NOTSENT_LOWAT`). Without it, a client that reads nothing
/// has megabytes queued for it in the kernel, and one that reads slowly
/// leaves dockhand's writes waiting until a third of those have drained:
/// the send timeout could not tell the one from the other.
const UNSENT_BYTES: u32 = 128 * 1024;

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
        if let Err(error) = SockRef::from(&stream).set_tcp_notsent_lowat(UNSENT_BYTES) {
            tracing::debug!(%error, "TCP_NOTSENT_LOWAT not set");
        }
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

    /// Writes with `write` unless the connection was cut: a write that
    /// finds the socket full stalls, anything else ends a stall.
    fn write_with(
        &mut self,
        cx: &mut Context<'_>,
        write: impl FnOnce(&TcpStream, &mut Context<'_>) -> Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        if self.cut.is_cut() {
            return Poll::Ready(Err(self.cut_error()));
        }
        match write(&self.stream, cx) {
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
        socket_io::poll_read(&self.stream, cx, buf)
    }
}

impl AsyncWrite for ClientSocket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut()
            .write_with(cx, |stream, cx| socket_io::poll_write(stream, cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().write_with(cx, |stream, cx| {
            socket_io::poll_write_vectored(stream, cx, bufs)
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpSocket};

    const TIMEOUT: Duration = Duration::from_secs(10);

    /// A wrapped server-side socket and its client, whose receive buffer
    /// is small.
    async fn pair() -> (ClientSocket, TcpStream, Arc<ClientCut>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpSocket::new_v4().unwrap();
        client.set_recv_buffer_size(16 * 1024).unwrap();
        let client = client
            .connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let cut = Arc::new(ClientCut::new(TIMEOUT));
        (ClientSocket::new(server, cut.clone()), client, cut)
    }

    #[tokio::test]
    async fn writes_that_go_through_arm_no_timer() {
        let (mut socket, mut client, cut) = pair().await;
        let mut read = [0; 1024];
        for _ in 0..1000 {
            socket.write_all(&[1; 1024]).await.unwrap();
            client.read_exact(&mut read).await.unwrap();
        }
        assert!(socket.deadline.is_none(), "a timer was made");
        assert!(!cut.is_cut());
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_reads_nothing_is_cut_after_the_timeout() {
        let (mut socket, _client, cut) = pair().await;
        let started = Instant::now();
        let error = loop {
            if let Err(error) = socket.write_all(&[1; 64 * 1024]).await {
                break error;
            }
        };
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= TIMEOUT);
        assert!(cut.is_cut());
        assert!(cut.cause().contains("10s (--client-send-timeout)"));
        // Later writes fail at once, without waiting again.
        let again = socket.write(&[1]).await.unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::TimedOut);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_reads_slowly_but_steadily_is_not_cut() {
        use std::sync::atomic::AtomicUsize;
        const TOTAL: usize = 8 * 1024 * 1024;
        const READ: usize = 128 * 1024;
        let (mut socket, client, cut) = pair().await;
        let written = Arc::new(AtomicUsize::new(0));
        let writing = {
            let written = written.clone();
            async move {
                let chunk = [1; 64 * 1024];
                while written.load(Ordering::SeqCst) < TOTAL {
                    let n = socket.write(&chunk).await?;
                    written.fetch_add(n, Ordering::SeqCst);
                }
                socket.shutdown().await
            }
        };
        // 128 KiB every 4 s: far slower than the socket, far more often
        // than the timeout. The paused clock moves on whenever every task
        // waits, so the reader never waits on the socket: it spins (which
        // stops the clock) until its bytes and the writer's next ones came.
        let reading = async move {
            let mut read = vec![0; READ];
            let mut total = 0;
            while total < TOTAL {
                tokio::time::sleep(TIMEOUT * 2 / 5).await;
                let before = written.load(Ordering::SeqCst);
                let mut filled = 0;
                while filled < READ {
                    match client.try_read(&mut read[filled..]) {
                        Ok(0) => return total + filled,
                        Ok(n) => filled += n,
                        Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                        Err(_) => return total + filled,
                    }
                    tokio::task::yield_now().await;
                }
                total += READ;
                for _ in 0..100_000 {
                    if written.load(Ordering::SeqCst) != before || total == TOTAL {
                        break;
                    }
                    tokio::task::yield_now().await;
                }
            }
            total
        };
        let (written, read) = tokio::join!(writing, reading);
        written.expect("the steady reader was not cut");
        assert_eq!(read, TOTAL);
        assert!(!cut.is_cut());
    }
}
