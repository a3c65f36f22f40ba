//! A connection handed to hyper's server with the bytes the own server had
//! already read from it: they are read again first, then the socket.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::http1::buffers::LentBuffer;

pub struct Rewound<S> {
    io: S,
    /// Read before the socket; `None` once used up.
    read: Option<LentBuffer>,
    at: usize,
}

impl<S> Rewound<S> {
    pub fn new(io: S, read: Option<LentBuffer>) -> Rewound<S> {
        Rewound { io, read, at: 0 }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewound<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some(read) = &this.read {
            let rest = &read[this.at..];
            let count = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..count]);
            this.at += count;
            if this.at == read.len() {
                this.read = None;
            }
            if count > 0 {
                return Poll::Ready(Ok(()));
            }
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewound<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;
    use crate::http1::buffers;

    #[tokio::test]
    async fn the_bytes_read_before_come_first() {
        let (mut client, server) = tokio::io::duplex(64);
        let mut read = buffers::lend();
        read.spare()[..4].copy_from_slice(b"GET ");
        read.mark_filled(4);
        let mut rewound = Rewound::new(server, Some(read));
        tokio::io::AsyncWriteExt::write_all(&mut client, b"/ HTTP/1.1\r\n")
            .await
            .unwrap();
        drop(client);
        let mut all = String::new();
        rewound.read_to_string(&mut all).await.unwrap();
        assert_eq!(all, "GET / HTTP/1.1\r\n");
    }
}
