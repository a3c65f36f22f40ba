//! The small copies a request makes (its head, its upstream's response
//! head, a header value dockhand writes, a short body frame), cut from one
//! buffer the worker thread shares among them instead of one allocation
//! each. A copy is a `Bytes` that counts a reference to its buffer. When
//! the buffer is spent, the request under way still holds copies of it, so
//! it is put aside and the buffer spent before it is taken back whole, if
//! every copy of that one is gone (the usual case: its requests have
//! ended); else a new one is started, and the oldest is freed with its last
//! copy. A worker serving requests one after another so cuts every copy
//! from the same two buffers.
//!
//! What this costs in memory: a copy that lives long (a streamed response's
//! request head) keeps its whole buffer, `CHUNK_BYTES`, alive. Copies over
//! `MOST_SHARED` bytes are allocated on their own, so one large head never
//! spends a buffer, and a buffer is shared by many copies before it is spent.

use std::cell::RefCell;

use bytes::{Bytes, BytesMut};

/// The size of the buffer copies are cut from.
const CHUNK_BYTES: usize = 8 * 1024;

/// The largest copy cut from the shared buffer.
const MOST_SHARED: usize = CHUNK_BYTES / 4;

/// A thread's buffers (empty before its first copy).
#[derive(Default)]
struct Buffers {
    /// The unused end of the buffer copies are cut from.
    spare: BytesMut,
    /// The end of the buffer spent before it, kept to be taken back.
    spent: BytesMut,
}

impl Buffers {
    /// Makes room for a copy of `len` bytes (at most `CHUNK_BYTES`).
    fn make_room(&mut self, len: usize) {
        if self.spare.capacity() >= len || self.spare.try_reclaim(CHUNK_BYTES) {
            return;
        }
        let fresh = if self.spent.try_reclaim(CHUNK_BYTES) {
            std::mem::take(&mut self.spent)
        } else {
            BytesMut::with_capacity(CHUNK_BYTES)
        };
        self.spent = std::mem::replace(&mut self.spare, fresh);
    }
}

thread_local! {
    static BUFFERS: RefCell<Buffers> = RefCell::new(Buffers::default());
}

/// A copy of `bytes` (none is made of nothing, which would keep a buffer).
pub fn copy(bytes: &[u8]) -> Bytes {
    if bytes.is_empty() {
        return Bytes::new();
    }
    written(bytes.len(), |out| out.extend_from_slice(bytes))
}

/// The bytes `write` writes, which are `len` bytes long. A `write` that
/// writes more than `len` still works, and may allocate.
pub fn written(len: usize, write: impl FnOnce(&mut BytesMut)) -> Bytes {
    if len > MOST_SHARED {
        return written_alone(len, write);
    }
    BUFFERS.with(|buffers| {
        // Lent to one `write` at a time: a `write` that itself made a copy
        // would find them lent, and its copy would be allocated alone.
        let Ok(mut buffers) = buffers.try_borrow_mut() else {
            return written_alone(len, write);
        };
        buffers.make_room(len);
        write(&mut buffers.spare);
        buffers.spare.split().freeze()
    })
}

fn written_alone(len: usize, write: impl FnOnce(&mut BytesMut)) -> Bytes {
    let mut own = BytesMut::with_capacity(len);
    write(&mut own);
    own.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_are_their_bytes_and_outlive_the_buffer_they_came_from() {
        let first = copy(b"GET / HTTP/1.1\r\n");
        let many: Vec<Bytes> = (0..2_000u32)
            .map(|n| copy(n.to_string().as_bytes()))
            .collect();
        assert_eq!(&first[..], b"GET / HTTP/1.1\r\n");
        for (n, bytes) in many.iter().enumerate() {
            assert_eq!(&bytes[..], n.to_string().as_bytes());
        }
    }

    #[test]
    fn a_large_copy_is_whole() {
        let large = vec![7u8; MOST_SHARED * 3];
        assert_eq!(copy(&large), large);
        assert_eq!(copy(b"small"), &b"small"[..]);
    }

    #[test]
    fn written_bytes_are_what_was_written_even_past_the_length_said() {
        let said = written(3, |out| out.extend_from_slice(b"abc"));
        let more = written(2, |out| out.extend_from_slice(&[b'x'; CHUNK_BYTES * 2]));
        assert_eq!(&said[..], b"abc");
        assert_eq!(more.len(), CHUNK_BYTES * 2);
        assert_eq!(copy(b"after"), &b"after"[..]);
    }

    #[test]
    fn a_copy_made_while_writing_one_is_whole() {
        let outer = written(6, |out| {
            let inner = copy(b"inner");
            out.extend_from_slice(b"outer ");
            assert_eq!(&inner[..], b"inner");
        });
        assert_eq!(&outer[..], b"outer ");
    }

    #[test]
    fn a_spent_buffer_is_used_again_once_its_copies_are_gone() {
        let per_buffer = CHUNK_BYTES / MOST_SHARED;
        // Each test has a thread, so this is the buffer's first copy.
        let start = copy(&[1u8; MOST_SHARED]).as_ptr();
        for _ in 1..per_buffer {
            drop(copy(&[2u8; MOST_SHARED]));
        }
        let kept = copy(&[3u8; MOST_SHARED]);
        assert_eq!(kept.as_ptr(), start, "taken back from its start");
        for _ in 1..per_buffer {
            drop(copy(&[4u8; MOST_SHARED]));
        }
        let next = copy(&[5u8; MOST_SHARED]);
        assert_ne!(
            next.as_ptr(),
            start,
            "a buffer with a live copy is not reused"
        );
        assert_eq!(&kept[..], &[3u8; MOST_SHARED][..]);
    }
}
