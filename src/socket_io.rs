//! Reads and writes on a tokio TCP stream made by system call, not through
//! glibc's `recv`, `send` and `writev`. Those are thread-cancellation
//! points: each wraps its call in two atomic updates of the thread's
//! cancellation state, and an atomic update waits for every store before
//! it to reach the cache. With hundreds of connections a request's stores
//! miss the cache, so a request's four socket calls cost those waits eight
//! times. dockhand never cancels a thread, so the wrappers buy it nothing.
//!
//! The readiness bookkeeping is tokio's own (`poll_*_ready`, `try_io`), as
//! its `AsyncRead` and `AsyncWrite` for `TcpStream` do it, including their
//! shortcut for epoll (dockhand runs on Linux): a read or write that moves
//! fewer bytes than it could shows the socket drained (or full), so the
//! next call waits for readiness instead of making a system call that
//! would only say "not yet". A gathered write is a plain `writev`, as
//! std's is: a peer gone raises no signal, as Rust programs ignore SIGPIPE.

use std::io::{self, IoSlice};
use std::task::{ready, Context, Poll};

use rustix::net::{RecvFlags, SendFlags};
use tokio::io::{Interest, ReadBuf};
use tokio::net::TcpStream;

/// `AsyncRead::poll_read` for `stream`.
pub fn poll_read(
    stream: &TcpStream,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<io::Result<()>> {
    let room = buf.remaining();
    let receive = || {
        // SAFETY: `recv` only writes into the unfilled part, and leaves no
        // byte uninitialized that was not.
        let unfilled = unsafe { buf.unfilled_mut() };
        rustix::net::recv(stream, unfilled, RecvFlags::empty()).map(|((filled, _), _)| filled.len())
    };
    let count = ready!(poll_transfer(
        stream,
        cx,
        Direction::Read,
        Some(room),
        receive
    ))?;
    // SAFETY: `recv` wrote (initialized) the `count` bytes.
    unsafe { buf.assume_init(count) };
    buf.advance(count);
    Poll::Ready(Ok(()))
}

/// `AsyncWrite::poll_write` for `stream`.
pub fn poll_write(
    stream: &TcpStream,
    cx: &mut Context<'_>,
    bytes: &[u8],
) -> Poll<io::Result<usize>> {
    poll_transfer(stream, cx, Direction::Write, Some(bytes.len()), || {
        // `MSG_NOSIGNAL`: a peer gone is an error, not a signal.
        rustix::net::send(stream, bytes, SendFlags::NOSIGNAL)
    })
}

/// `AsyncWrite::poll_write_vectored` for `stream`.
pub fn poll_write_vectored(
    stream: &TcpStream,
    cx: &mut Context<'_>,
    slices: &[IoSlice<'_>],
) -> Poll<io::Result<usize>> {
    // As tokio's does: a short gathered write is not taken to show the
    // socket full.
    poll_transfer(stream, cx, Direction::Write, None, || {
        rustix::io::writev(stream, slices)
    })
}

/// Which readiness a transfer waits for.
#[derive(Clone, Copy)]
enum Direction {
    Read,
    Write,
}

/// Moves bytes with `transfer` once `stream` is ready for `direction`, and
/// answers the count moved. A transfer shorter than `whole` (the room or
/// the bytes it was given, where known) shows the socket drained or full.
fn poll_transfer(
    stream: &TcpStream,
    cx: &mut Context<'_>,
    direction: Direction,
    whole: Option<usize>,
    mut transfer: impl FnMut() -> rustix::io::Result<usize>,
) -> Poll<io::Result<usize>> {
    let interest = match direction {
        Direction::Read => Interest::READABLE,
        Direction::Write => Interest::WRITABLE,
    };
    loop {
        ready!(match direction {
            Direction::Read => stream.poll_read_ready(cx),
            Direction::Write => stream.poll_write_ready(cx),
        })?;
        let mut moved = None;
        let outcome = stream.try_io(interest, || {
            let count = retried(&mut transfer)?;
            moved = Some(count);
            // Told as "would block" so that tokio clears the readiness;
            // the count is in `moved`.
            if whole.is_some_and(|whole| 0 < count && count < whole) {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(())
        });
        match (outcome, moved) {
            (Err(error), _) if error.kind() != io::ErrorKind::WouldBlock => {
                return Poll::Ready(Err(error))
            }
            (_, Some(count)) => return Poll::Ready(Ok(count)),
            // Not ready after all: wait again.
            _ => continue,
        }
    }
}

/// Whether `stream` has nothing to read, asked without waiting and without
/// entering a waker: a socket tokio last saw drained is taken as quiet with
/// no system call at all (a new byte, or the peer's close, makes it
/// readable once tokio's driver has seen it, as for any read). Else one
/// byte is read, and lost: a connection with a byte waiting, or ended, is
/// not used again.
pub fn is_quiet(stream: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    let read = stream.try_io(Interest::READABLE, || {
        retried(|| rustix::net::recv(stream, &mut byte[..], RecvFlags::empty()).map(|(n, _)| n))
    });
    matches!(read, Err(error) if error.kind() == io::ErrorKind::WouldBlock)
}

/// `call`'s result, made again if a signal interrupted it; a socket that
/// would block is `WouldBlock`, as `std` reports it.
fn retried<T>(mut call: impl FnMut() -> rustix::io::Result<T>) -> io::Result<T> {
    loop {
        match call() {
            Err(rustix::io::Errno::INTR) => continue,
            result => return result.map_err(io::Error::from),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use std::time::Duration;

    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let near = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (far, _) = listener.accept().await.unwrap();
        (near, far)
    }

    async fn read_some(stream: &TcpStream, room: usize) -> io::Result<Vec<u8>> {
        let mut bytes = vec![0; room];
        let mut buf = ReadBuf::new(&mut bytes);
        poll_fn(|cx| poll_read(stream, cx, &mut buf)).await?;
        let count = buf.filled().len();
        bytes.truncate(count);
        Ok(bytes)
    }

    /// `count` bytes, read `room` at most at a time.
    async fn read_all(stream: &TcpStream, count: usize, room: usize) -> Vec<u8> {
        let mut seen = Vec::new();
        while seen.len() < count {
            seen.extend(read_some(stream, room).await.unwrap());
        }
        seen
    }

    #[tokio::test]
    async fn bytes_written_are_the_bytes_read() {
        let (near, far) = pair().await;
        let count = poll_fn(|cx| poll_write(&near, cx, b"hello")).await.unwrap();
        assert_eq!(count, 5);
        // Gathered writes one after another: a whole one leaves the socket
        // writable for the next (with no new readiness to wake it).
        for _ in 0..2 {
            let slices = [IoSlice::new(b" wide"), IoSlice::new(b" world")];
            let written = poll_fn(|cx| poll_write_vectored(&near, cx, &slices));
            let count = tokio::time::timeout(Duration::from_secs(5), written)
                .await
                .expect("a socket with room is written at once")
                .unwrap();
            assert_eq!(count, 11);
        }
        assert_eq!(read_all(&far, 27, 64).await, b"hello wide world wide world");
    }

    #[tokio::test]
    async fn a_read_after_a_short_one_waits_for_the_next_bytes() {
        let (mut near, far) = pair().await;
        near.write_all(b"first").await.unwrap();
        assert_eq!(read_some(&far, 64).await.unwrap(), b"first");
        // The short read cleared the readiness: the next read waits, and
        // is woken by the bytes that come.
        let later = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            near.write_all(b"second").await.unwrap();
            near
        });
        assert_eq!(read_some(&far, 64).await.unwrap(), b"second");
        drop(later.await.unwrap());
    }

    #[tokio::test]
    async fn a_read_that_fills_its_room_leaves_the_rest_for_the_next() {
        let (mut near, far) = pair().await;
        near.write_all(b"abcdef").await.unwrap();
        assert_eq!(read_some(&far, 3).await.unwrap(), b"abc");
        assert_eq!(read_all(&far, 3, 3).await, b"def");
    }

    #[tokio::test]
    async fn a_quiet_socket_is_quiet_until_it_has_bytes_or_is_closed() {
        let (mut near, far) = pair().await;
        assert!(is_quiet(&far), "nothing sent");
        // Seen drained once, then asked again without a system call.
        assert!(is_quiet(&far), "still nothing sent");
        near.write_all(b"x").await.unwrap();
        far.readable().await.unwrap();
        assert!(!is_quiet(&far), "a byte waiting");
        drop(near);
        far.readable().await.unwrap();
        assert!(!is_quiet(&far), "closed by the peer");
    }

    #[tokio::test]
    async fn a_closed_peer_reads_as_the_end_and_fails_a_write() {
        let (near, far) = pair().await;
        drop(far);
        assert!(read_some(&near, 8).await.unwrap().is_empty());
        // The first write may still be taken; the reset fails a later one,
        // with an error, not a signal.
        let mut failed = None;
        for _ in 0..100 {
            if let Err(error) = poll_fn(|cx| poll_write(&near, cx, b"x")).await {
                failed = Some(error);
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let error = failed.expect("a write to a closed peer fails");
        assert!(matches!(
            error.kind(),
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
        ));
    }
}
