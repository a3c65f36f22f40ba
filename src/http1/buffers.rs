//! Read buffers lent by the worker thread, so that a connection holds one
//! only while bytes are in flight: an idle keep-alive connection waits for
//! readiness with no buffer, takes one when its socket turns readable, and
//! gives it back when the request is done. Each thread keeps its own free
//! list (no lock: a worker's tasks never leave its thread), bounded so that
//! a burst of connections does not leave its peak's memory behind.
//!
//! A buffer starts at `BUFFER_BYTES`; a request head larger than that grows
//! it up to `MAX_REQUEST_HEAD_BYTES`, and a grown buffer is freed rather than
//! kept, so the free list holds standard buffers only.

use std::cell::RefCell;
use std::ops::Deref;
use std::task::{ready, Poll};

use super::MAX_REQUEST_HEAD_BYTES;

/// What one lent buffer holds: most request heads, and a read's worth of
/// body to pass on.
pub const BUFFER_BYTES: usize = 16 * 1024;

/// The most free buffers a thread keeps (4 MiB of them).
const MOST_KEPT: usize = 256;

thread_local! {
    static FREE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// A buffer of this thread's pool, given back when dropped. It derefs to
/// the bytes read into it so far.
pub struct LentBuffer {
    /// Initialised to its whole length once, when first allocated: reads
    /// go straight into it, with no zeroing per lending.
    bytes: Vec<u8>,
    filled: usize,
}

/// The buffer can't grow any further: the head it must hold is over the limit.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("a request head of over {MAX_REQUEST_HEAD_BYTES} bytes")]
pub struct HeadTooLarge;

/// Lends a buffer from this thread's free list, or a new one.
pub fn lend() -> LentBuffer {
    let bytes = FREE
        .with(|free| free.borrow_mut().pop())
        .unwrap_or_else(|| vec![0; BUFFER_BYTES]);
    LentBuffer { bytes, filled: 0 }
}

/// Reads into the buffer in `slot` with `read` (given the room after what
/// the buffer holds, it says how many bytes came), lending one for the read
/// if `slot` holds none, and giving it back if it still holds nothing: a
/// connection waiting for bytes holds no buffer, however long it waits.
/// `Ok(0)` is the end of the stream.
pub fn poll_fill<E>(
    slot: &mut Option<LentBuffer>,
    read: impl FnOnce(&mut [u8]) -> Poll<Result<usize, E>>,
) -> Poll<Result<usize, E>> {
    let buffer = slot.get_or_insert_with(lend);
    let result = read(buffer.spare());
    if let Poll::Ready(Ok(count)) = result {
        buffer.mark_filled(count);
    }
    if buffer.is_empty() {
        *slot = None;
    }
    let count = ready!(result)?;
    Poll::Ready(Ok(count))
}

/// How many free buffers this thread keeps now.
#[cfg(test)]
pub(crate) fn kept() -> usize {
    FREE.with(|free| free.borrow().len())
}

impl LentBuffer {
    /// The room after what was read, where the next read goes; empty when
    /// the buffer is full (`grow` it, or pass on what it holds).
    pub fn spare(&mut self) -> &mut [u8] {
        &mut self.bytes[self.filled..]
    }

    /// Marks the first `count` bytes of `spare()` as read.
    pub fn mark_filled(&mut self, count: usize) {
        self.filled = (self.filled + count).min(self.bytes.len());
    }

    /// Doubles the buffer, up to `MAX_REQUEST_HEAD_BYTES`, for a head that did
    /// not fit; what was read is kept.
    pub fn grow(&mut self) -> Result<(), HeadTooLarge> {
        let size = self.bytes.len();
        if size >= MAX_REQUEST_HEAD_BYTES {
            return Err(HeadTooLarge);
        }
        self.bytes.resize((size * 2).min(MAX_REQUEST_HEAD_BYTES), 0);
        Ok(())
    }

    /// Drops the first `count` bytes read (a request done with), moving what
    /// follows (a pipelined request's start) to the front.
    pub fn consume(&mut self, count: usize) {
        let count = count.min(self.filled);
        self.bytes.copy_within(count..self.filled, 0);
        self.filled -= count;
    }

    /// The buffer's size: `BUFFER_BYTES` unless it grew.
    pub fn size(&self) -> usize {
        self.bytes.len()
    }
}

impl Deref for LentBuffer {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes[..self.filled]
    }
}

impl Drop for LentBuffer {
    fn drop(&mut self) {
        // A grown buffer is freed: the list keeps standard ones only.
        if self.bytes.len() != BUFFER_BYTES {
            return;
        }
        let bytes = std::mem::take(&mut self.bytes);
        // `try_with`: a buffer dropped while its thread exits (its free
        // list already gone) is simply freed.
        let _ = FREE.try_with(|free| {
            let mut free = free.borrow_mut();
            if free.len() < MOST_KEPT {
                free.push(bytes);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each test runs on a thread of its own, so the free list starts empty.
    #[test]
    fn a_buffer_given_back_is_lent_again_without_a_new_allocation() {
        assert_eq!(kept(), 0);
        let mut first = lend();
        first.spare()[..5].copy_from_slice(b"GET /");
        first.mark_filled(5);
        let address = first.bytes.as_ptr();
        drop(first);
        assert_eq!(kept(), 1);
        let again = lend();
        assert_eq!(again.bytes.as_ptr(), address, "the same allocation");
        assert!(again.is_empty(), "lent empty, whatever it held before");
        assert_eq!(kept(), 0);
    }

    #[test]
    fn a_head_grows_the_buffer_up_to_the_limit_and_no_further() {
        let mut buffer = lend();
        buffer.spare().fill(b'a');
        buffer.mark_filled(BUFFER_BYTES);
        assert!(buffer.spare().is_empty());
        let mut sizes = vec![buffer.size()];
        while buffer.grow().is_ok() {
            sizes.push(buffer.size());
        }
        assert_eq!(sizes, [16 * 1024, 32 * 1024, 64 * 1024, 128 * 1024]);
        assert_eq!(buffer.grow(), Err(HeadTooLarge));
        assert_eq!(buffer.len(), BUFFER_BYTES, "what was read is kept");
        assert!(buffer.iter().all(|&byte| byte == b'a'));
        drop(buffer);
        assert_eq!(kept(), 0, "a grown buffer is freed, not kept");
    }

    #[test]
    fn consuming_a_request_keeps_the_pipelined_bytes_after_it() {
        let mut buffer = lend();
        let read = b"GET /a HTTP/1.1\r\n\r\nGET /b";
        buffer.spare()[..read.len()].copy_from_slice(read);
        buffer.mark_filled(read.len());
        buffer.consume(19);
        assert_eq!(&buffer[..], b"GET /b");
        buffer.consume(100);
        assert!(buffer.is_empty());
    }

    #[test]
    fn a_read_that_must_wait_gives_its_buffer_back() {
        let mut slot = None;
        let waited = poll_fill(&mut slot, |_| Poll::<Result<usize, ()>>::Pending);
        assert!(waited.is_pending());
        assert!(slot.is_none(), "nothing held while waiting");
        assert_eq!(kept(), 1, "the buffer lent for the read is back");
        let read = poll_fill(&mut slot, |spare: &mut [u8]| {
            spare[..3].copy_from_slice(b"GET");
            Poll::<Result<usize, ()>>::Ready(Ok(3))
        });
        assert_eq!(read, Poll::Ready(Ok(3)));
        assert_eq!(slot.as_deref(), Some(&b"GET"[..]));
        assert_eq!(kept(), 0);
        // A buffer holding bytes is kept through a wait, and the end too.
        assert!(poll_fill(&mut slot, |_| Poll::<Result<usize, ()>>::Pending).is_pending());
        assert_eq!(
            poll_fill(&mut slot, |_| Poll::Ready(Ok::<_, ()>(0))),
            Poll::Ready(Ok(0))
        );
        assert_eq!(slot.as_deref(), Some(&b"GET"[..]));
        let ended = poll_fill(&mut None, |_| Poll::Ready(Err("reset")));
        assert_eq!(ended, Poll::Ready(Err("reset")));
        assert_eq!(kept(), 1, "given back after an error with nothing read");
    }

    #[test]
    fn the_free_list_is_bounded() {
        let many: Vec<LentBuffer> = (0..MOST_KEPT + 10).map(|_| lend()).collect();
        drop(many);
        assert_eq!(kept(), MOST_KEPT);
    }
}
