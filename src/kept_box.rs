//! Boxes whose memory the thread keeps for the next box of the same size.
//! A request's state that must live apart from its connection (the
//! request's future, its access record) is boxed, so that an idle
//! connection holds none of it; so are the upstream exchange's future and
//! the upstream's response body, so that the layers wrapping them move a
//! pointer rather than their bytes. With
//! `KeptBox` a worker hands the same few blocks from one request to the
//! next instead of asking the allocator for each. Each thread keeps its
//! own blocks (no lock: a box dropped on another thread gives its block to
//! that thread), a bounded number per size, and none larger than
//! `LARGEST_KEPT`. The most a worker keeps is
//! what its largest burst of requests at once needed: for a request's
//! future (about 5 KiB), 5 MiB after 1,024 requests at once.
//!
//! The one place of the crate with `unsafe` code: a block is memory the
//! box owns, written once by `new` and read in place until `drop`, exactly
//! as `Box` does with its own allocation.

use std::alloc::{self, Layout};
use std::cell::RefCell;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::ptr::{self, NonNull};

/// The most blocks of one size a thread keeps: as many requests as a
/// worker usually has in flight at once.
const MOST_KEPT_PER_SIZE: usize = 1024;

/// Blocks larger than this go back to the allocator.
const LARGEST_KEPT: usize = 64 * 1024;

/// The most sizes a thread keeps blocks of (a few types are boxed this way).
const MOST_SIZES: usize = 8;

/// A value in a block of memory this thread took from its kept ones (or
/// from the allocator, when it kept none of its size). Like `Box`: the
/// value never moves while the box lives, so `KeptBox::pin` can pin it.
pub struct KeptBox<T> {
    value: NonNull<T>,
    /// The box owns a `T` (for drop checking and auto traits).
    _owns: PhantomData<T>,
}

// SAFETY: a `KeptBox<T>` owns its `T` alone, as `Box<T>` does.
unsafe impl<T: Send> Send for KeptBox<T> {}
// SAFETY: shared access to a `KeptBox<T>` is shared access to its `T`.
unsafe impl<T: Sync> Sync for KeptBox<T> {}

/// Moving the box moves only its pointer, as for `Box`.
impl<T> Unpin for KeptBox<T> {}

impl<T> KeptBox<T> {
    pub fn new(value: T) -> KeptBox<T> {
        let block = take_block(Layout::new::<T>()).cast::<T>();
        // SAFETY: the block is valid for writes of a `T` and aligned for it
        // (it has `T`'s layout), and nothing else refers to it.
        unsafe { block.as_ptr().write(value) };
        KeptBox {
            value: block,
            _owns: PhantomData,
        }
    }

    /// A pinned box, as `Box::pin`: for futures polled in place.
    pub fn pin(value: T) -> Pin<KeptBox<T>> {
        // SAFETY: the value stays where `new` wrote it until `drop` drops it
        // in place, and the box gives out no way to move it but `DerefMut`,
        // which `Pin` withholds.
        unsafe { Pin::new_unchecked(KeptBox::new(value)) }
    }
}

impl<T> Deref for KeptBox<T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: `new` wrote a `T` there, and `drop` alone takes it away.
        unsafe { self.value.as_ref() }
    }
}

impl<T> DerefMut for KeptBox<T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as for `deref`, and `&mut self` makes the access unique.
        unsafe { self.value.as_mut() }
    }
}

impl<T> Drop for KeptBox<T> {
    fn drop(&mut self) {
        // SAFETY: the `T` is there and is dropped once, here; the block is
        // not used again by this box. (If its drop panics, the block is
        // leaked, never reused.)
        unsafe { ptr::drop_in_place(self.value.as_ptr()) };
        give_block(self.value.cast(), Layout::new::<T>());
    }
}

/// The blocks of one size and alignment a thread keeps.
struct Blocks {
    layout: Layout,
    free: Vec<NonNull<u8>>,
}

/// A thread's kept blocks; they go back to the allocator when it ends.
struct Kept(Vec<Blocks>);

impl Kept {
    /// A kept block for `layout`, if there is one.
    fn take(&mut self, layout: Layout) -> Option<NonNull<u8>> {
        let blocks = self.0.iter_mut().find(|blocks| blocks.layout == layout)?;
        blocks.free.pop()
    }

    /// Keeps `block`, unless enough of its size are kept already (or of as
    /// many sizes): then it is the caller's to free.
    fn keep(&mut self, block: NonNull<u8>, layout: Layout) -> bool {
        let index = match self.0.iter().position(|blocks| blocks.layout == layout) {
            Some(index) => index,
            None if self.0.len() < MOST_SIZES => {
                let free = Vec::new();
                self.0.push(Blocks { layout, free });
                self.0.len() - 1
            }
            None => return false,
        };
        let free = &mut self.0[index].free;
        let room = free.len() < MOST_KEPT_PER_SIZE;
        if room {
            free.push(block);
        }
        room
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        for blocks in &self.0 {
            for block in &blocks.free {
                // SAFETY: each block was allocated with this layout and is
                // owned by no box.
                unsafe { alloc::dealloc(block.as_ptr(), blocks.layout) };
            }
        }
    }
}

thread_local! {
    static KEPT: RefCell<Kept> = const { RefCell::new(Kept(Vec::new())) };
}

/// A block for `layout`: a kept one, or a new one.
fn take_block(layout: Layout) -> NonNull<u8> {
    if layout.size() == 0 {
        return aligned_dangling(layout);
    }
    let kept = KEPT.try_with(|kept| kept.borrow_mut().take(layout));
    kept.ok().flatten().unwrap_or_else(|| {
        // SAFETY: the layout's size is not zero.
        let block = unsafe { alloc::alloc(layout) };
        NonNull::new(block).unwrap_or_else(|| alloc::handle_alloc_error(layout))
    })
}

/// Keeps a block no box uses any more, or frees it: when it is too large,
/// the thread keeps enough of its size already, or the thread is ending.
fn give_block(block: NonNull<u8>, layout: Layout) {
    if layout.size() == 0 {
        return;
    }
    let kept = layout.size() <= LARGEST_KEPT
        && KEPT
            .try_with(|kept| kept.borrow_mut().keep(block, layout))
            .unwrap_or(false);
    if !kept {
        // SAFETY: the block was allocated with this layout (its size is
        // not zero) and no box uses it any more.
        unsafe { alloc::dealloc(block.as_ptr(), layout) };
    }
}

/// Where a zero-sized value lives: no memory, but an aligned address.
fn aligned_dangling(layout: Layout) -> NonNull<u8> {
    // An address equal to the alignment is aligned and never null.
    NonNull::new(ptr::without_provenance_mut(layout.align())).expect("an alignment is not zero")
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::future::Future;
    use std::rc::Rc;
    use std::task::{Context, Poll, Waker};

    use super::*;

    /// Counts its drops.
    struct Dropped(Rc<Cell<u32>>, #[allow(dead_code)] [u64; 8]);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.set(self.0.get() + 1);
        }
    }

    fn free_of(layout: Layout) -> usize {
        KEPT.with_borrow(|kept| {
            kept.0
                .iter()
                .find(|blocks| blocks.layout == layout)
                .map_or(0, |blocks| blocks.free.len())
        })
    }

    #[test]
    fn a_box_dropped_gives_its_block_to_the_next_box_of_its_size() {
        let first = KeptBox::new([7u8; 300]);
        let block = first.value.cast::<u8>();
        drop(first);
        let second = KeptBox::new([9u8; 300]);
        assert_eq!(second.value.cast::<u8>(), block);
        assert_eq!(*second, [9u8; 300]);
    }

    #[test]
    fn the_value_is_dropped_once_when_the_box_is() {
        let drops = Rc::new(Cell::new(0));
        let boxed = KeptBox::new(Dropped(drops.clone(), [0; 8]));
        assert_eq!(drops.get(), 0);
        drop(boxed);
        assert_eq!(drops.get(), 1);
    }

    #[test]
    fn boxes_of_other_sizes_keep_blocks_of_their_own() {
        let small = KeptBox::new(1u32);
        let large = KeptBox::new([1u64; 64]);
        let (small_block, large_block) = (small.value.cast::<u8>(), large.value.cast::<u8>());
        drop(small);
        drop(large);
        assert_eq!(KeptBox::new([2u64; 64]).value.cast::<u8>(), large_block);
        assert_eq!(KeptBox::new(2u32).value.cast::<u8>(), small_block);
    }

    #[test]
    fn no_more_than_the_most_blocks_of_a_size_are_kept() {
        let layout = Layout::new::<[u16; 333]>();
        let boxes: Vec<_> = (0..MOST_KEPT_PER_SIZE + 5)
            .map(|_| KeptBox::new([0u16; 333]))
            .collect();
        drop(boxes);
        assert_eq!(free_of(layout), MOST_KEPT_PER_SIZE);
    }

    #[test]
    fn a_large_block_goes_back_to_the_allocator() {
        drop(KeptBox::new([0u8; LARGEST_KEPT + 1]));
        assert_eq!(free_of(Layout::new::<[u8; LARGEST_KEPT + 1]>()), 0);
    }

    #[test]
    fn zero_sized_values_take_no_block() {
        let boxed = KeptBox::new(());
        assert_eq!(boxed.value.as_ptr() as usize % align_of::<()>(), 0);
        drop(boxed);
        assert_eq!(free_of(Layout::new::<()>()), 0);
    }

    #[test]
    fn a_pinned_future_runs_in_its_block() {
        let mut future = KeptBox::pin(async { 6 * 7 });
        let mut cx = Context::from_waker(Waker::noop());
        assert_eq!(future.as_mut().poll(&mut cx), Poll::Ready(42));
    }

    #[test]
    fn a_box_dropped_on_another_thread_gives_its_block_to_that_thread() {
        let boxed = KeptBox::new([5u32; 77]);
        let moved_to = std::thread::spawn(move || {
            drop(boxed);
            free_of(Layout::new::<[u32; 77]>())
        })
        .join()
        .unwrap();
        assert_eq!(moved_to, 1);
        assert_eq!(free_of(Layout::new::<[u32; 77]>()), 0);
    }
}
