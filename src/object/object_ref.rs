//! Reference-counted objects with tvm-ffi's protocol.
//!
//! The header's `combined_ref_count` keeps the strong count in its low 32 bits and the weak count
//! in its high 32 bits. All strong references together hold one weak reference, so a new object
//! starts at `0x1_00000001`. Increments are relaxed; decrements release, and the thread that
//! drops the last reference fences (acquire) before it calls the deleter: with flag 3 when both
//! counts end together, with flag 1 (destroy, keep memory) when weak references remain, and
//! with flag 2 (free memory) when the last weak reference goes later.

use std::alloc::{Layout, dealloc};
use std::ffi::c_void;
use std::marker::PhantomData;
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering, fence};

use crate::abi::{
    DELETER_FLAG_BOTH, DELETER_FLAG_STRONG, DELETER_FLAG_WEAK, DVMDeleter, DVMObject,
    OBJECT_HEADER_SIZE,
};

const STRONG_ONE: u64 = 1;
const WEAK_ONE: u64 = 1 << 32;
const BOTH_ONE: u64 = STRONG_ONE | WEAK_ONE;
const STRONG_MASK: u64 = 0xffff_ffff;

/// A type that can sit in an object's cell (at header + 24) with a known type index.
///
/// # Safety
/// Every object whose header carries `type_index()` must have a cell laid out as `Self`.
pub unsafe trait ObjectType: 'static {
    fn type_index() -> i32;
}

/// Declares the view of a static object type's cell: a `#[repr(transparent)]` wrapper of the C
/// cell, its type index, and `Send + Sync`: cells of these types are immutable once made, and
/// what they point at is either immutable (strings, shapes, array items) or, for tensor data and
/// function callbacks, shared under the rules of the library that made them.
macro_rules! object_cell {
    ($(#[$doc:meta])* $name:ident($cell:ty) = $index:expr) => {
        $(#[$doc])*
        #[repr(transparent)]
        pub struct $name($cell);

        // SAFETY: objects with this static type index have this cell (tvm-ffi's layout).
        unsafe impl $crate::object::ObjectType for $name {
            fn type_index() -> i32 {
                $index
            }
        }
        // SAFETY: see the macro's documentation.
        unsafe impl Send for $name {}
        // SAFETY: as above.
        unsafe impl Sync for $name {}
    };
}
pub(crate) use object_cell;

/// An object of any type: only its header is known (an untyped reference touches nothing else).
pub enum AnyObject {}

/// A strong reference to an object (one count of `combined_ref_count`).
pub struct ObjectRef<T> {
    ptr: NonNull<DVMObject>,
    _cell: PhantomData<T>,
}

// SAFETY: the count is atomic; the cells this crate defines are Send + Sync (see their impls).
unsafe impl<T: Send + Sync> Send for ObjectRef<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for ObjectRef<T> {}

#[repr(C)]
struct Boxed<T> {
    header: DVMObject,
    body: T,
}

/// The deleter of objects made by [`alloc_object`] with a `T` cell.
///
/// # Safety
/// `obj` was made by `alloc_object::<T>` (or [`alloc_object_with`]) and the protocol says this
/// call is due.
pub(crate) unsafe extern "C" fn delete_boxed<T>(obj: *mut c_void, flags: i32) {
    let boxed = obj.cast::<Boxed<T>>();
    if flags & DELETER_FLAG_STRONG != 0 {
        // SAFETY: the last strong reference is gone; the body is dropped exactly once.
        unsafe { std::ptr::drop_in_place(&raw mut (*boxed).body) };
    }
    if flags & DELETER_FLAG_WEAK != 0 {
        // SAFETY: the memory came from `Box::new(Boxed<T>)` and no reference remains.
        unsafe { dealloc(obj.cast(), Layout::new::<Boxed<T>>()) };
    }
}

/// Allocates an object with the given type index whose cell is `body`.
pub(crate) fn alloc_object<T: 'static>(type_index: i32, body: T) -> ObjectRef<T> {
    // SAFETY: the deleter made for this body type.
    unsafe { alloc_object_with(type_index, body, delete_boxed::<T>) }
}

/// [`alloc_object`] with a deleter of the caller's: a non-generic function that calls
/// [`delete_boxed`]`::<T>` has one address, so the objects it deletes can be told from objects
/// of the same type index that another library made.
///
/// # Safety
/// `deleter` does what `delete_boxed::<T>` does.
pub(crate) unsafe fn alloc_object_with<T: 'static>(
    type_index: i32,
    body: T,
    deleter: DVMDeleter,
) -> ObjectRef<T> {
    const { assert!(std::mem::align_of::<T>() <= 8, "cells start at header + 24") };
    let boxed = Box::new(Boxed {
        header: DVMObject {
            combined_ref_count: AtomicU64::new(BOTH_ONE),
            type_index,
            __padding: 0,
            deleter: Some(deleter),
        },
        body,
    });
    let ptr = NonNull::from(Box::leak(boxed)).cast::<DVMObject>();
    ObjectRef {
        ptr,
        _cell: PhantomData,
    }
}

impl<T> ObjectRef<T> {
    /// Takes over a reference the caller owns (+1).
    ///
    /// # Safety
    /// `ptr` points at a live object header and the caller gives up one strong reference.
    pub unsafe fn from_raw(ptr: NonNull<DVMObject>) -> Self {
        ObjectRef {
            ptr,
            _cell: PhantomData,
        }
    }

    /// Makes a new strong reference to a borrowed object.
    ///
    /// # Safety
    /// `ptr` points at a live object header.
    pub unsafe fn from_borrowed(ptr: NonNull<DVMObject>) -> Self {
        // SAFETY: the caller vouches for the header; adding a reference keeps it alive.
        unsafe { inc_ref(ptr) };
        ObjectRef {
            ptr,
            _cell: PhantomData,
        }
    }

    /// Gives up this reference without releasing it.
    pub fn into_raw(self) -> NonNull<DVMObject> {
        let ptr = self.ptr;
        std::mem::forget(self);
        ptr
    }

    pub fn as_ptr(&self) -> *mut DVMObject {
        self.ptr.as_ptr()
    }

    pub fn type_index(&self) -> i32 {
        self.header().type_index
    }

    /// The deleter in the object's header: which code made the object.
    pub(crate) fn deleter(&self) -> Option<DVMDeleter> {
        self.header().deleter
    }

    fn header(&self) -> &DVMObject {
        // SAFETY: a live reference keeps the header valid.
        unsafe { self.ptr.as_ref() }
    }

    /// The strong count (for tests and diagnostics).
    pub fn strong_count(&self) -> u32 {
        (self.header().combined_ref_count.load(Ordering::Relaxed) & STRONG_MASK) as u32
    }

    /// The weak count, including the one all strong references hold together.
    pub fn weak_count(&self) -> u32 {
        (self.header().combined_ref_count.load(Ordering::Relaxed) >> 32) as u32
    }

    /// A weak reference: keeps the memory, not the value.
    pub fn downgrade(&self) -> WeakRef<T> {
        self.header()
            .combined_ref_count
            .fetch_add(WEAK_ONE, Ordering::Relaxed);
        WeakRef {
            ptr: self.ptr,
            _cell: PhantomData,
        }
    }

    /// Forgets the cell type.
    pub fn erase(self) -> ObjectRef<AnyObject> {
        // SAFETY: the same reference, now untyped.
        unsafe { ObjectRef::from_raw(self.into_raw()) }
    }

    /// Reinterprets the cell.
    ///
    /// # Safety
    /// The object's cell must be laid out as `U`.
    pub(crate) unsafe fn cast<U>(self) -> ObjectRef<U> {
        // SAFETY: the same reference; the caller vouches for the layout.
        unsafe { ObjectRef::from_raw(self.into_raw()) }
    }
}

impl ObjectRef<AnyObject> {
    /// Checks the type index and gives a typed reference, or the object back.
    pub fn downcast<U: ObjectType>(self) -> std::result::Result<ObjectRef<U>, Self> {
        if self.type_index() == U::type_index() {
            // SAFETY: ObjectType promises this layout for this index.
            Ok(unsafe { self.cast() })
        } else {
            Err(self)
        }
    }

    /// Borrows the object as `U` if its type index matches.
    pub fn downcast_ref<U: ObjectType>(&self) -> Option<&ObjectRef<U>> {
        (self.type_index() == U::type_index())
            // SAFETY: same pointer and layout; ObjectRef<U> and ObjectRef<AnyObject> share layout.
            .then(|| unsafe { &*(self as *const Self).cast::<ObjectRef<U>>() })
    }
}

impl<T: ObjectType> Deref for ObjectRef<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: ObjectType promises a `T` cell right after the header.
        unsafe {
            &*self
                .ptr
                .as_ptr()
                .cast::<u8>()
                .add(OBJECT_HEADER_SIZE)
                .cast::<T>()
        }
    }
}

impl<T> Clone for ObjectRef<T> {
    fn clone(&self) -> Self {
        // SAFETY: this reference keeps the object alive.
        unsafe { ObjectRef::from_borrowed(self.ptr) }
    }
}

impl<T> Drop for ObjectRef<T> {
    fn drop(&mut self) {
        // SAFETY: this reference is owned and given up here.
        unsafe { dec_ref(self.ptr) }
    }
}

impl<T> std::fmt::Debug for ObjectRef<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ObjectRef(type {} at {:p})", self.type_index(), self.ptr)
    }
}

/// A weak reference: [`WeakRef::upgrade`] gives a strong one while the object lives.
pub struct WeakRef<T> {
    ptr: NonNull<DVMObject>,
    _cell: PhantomData<T>,
}

// SAFETY: only the atomic header is touched without upgrading.
unsafe impl<T> Send for WeakRef<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for WeakRef<T> {}

impl<T> WeakRef<T> {
    pub fn upgrade(&self) -> Option<ObjectRef<T>> {
        // SAFETY: a weak reference keeps the header's memory.
        let count = unsafe { &self.ptr.as_ref().combined_ref_count };
        let mut current = count.load(Ordering::Relaxed);
        loop {
            if current & STRONG_MASK == 0 {
                return None;
            }
            match count.compare_exchange_weak(
                current,
                current + STRONG_ONE,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    return Some(ObjectRef {
                        ptr: self.ptr,
                        _cell: PhantomData,
                    });
                }
                Err(seen) => current = seen,
            }
        }
    }
}

impl<T> Clone for WeakRef<T> {
    fn clone(&self) -> Self {
        // SAFETY: a weak reference keeps the header's memory.
        unsafe { self.ptr.as_ref() }
            .combined_ref_count
            .fetch_add(WEAK_ONE, Ordering::Relaxed);
        WeakRef {
            ptr: self.ptr,
            _cell: PhantomData,
        }
    }
}

impl<T> Drop for WeakRef<T> {
    fn drop(&mut self) {
        // SAFETY: this weak reference is owned and given up here.
        unsafe { dec_weak(self.ptr) }
    }
}

/// Adds a strong reference.
///
/// # Safety
/// `obj` points at a live object header.
pub unsafe fn inc_ref(obj: NonNull<DVMObject>) {
    // SAFETY: the caller vouches for the header.
    unsafe { obj.as_ref() }
        .combined_ref_count
        .fetch_add(STRONG_ONE, Ordering::Relaxed);
}

/// Drops a strong reference, destroying and freeing the object as the protocol says.
///
/// # Safety
/// `obj` points at a live object header and the caller owns one strong reference.
pub unsafe fn dec_ref(obj: NonNull<DVMObject>) {
    // SAFETY: the caller owns a reference, so the header is live.
    let header = unsafe { obj.as_ref() };
    let before = header
        .combined_ref_count
        .fetch_sub(STRONG_ONE, Ordering::Release);
    if before == BOTH_ONE {
        fence(Ordering::Acquire);
        // SAFETY: no reference of either kind is left.
        unsafe { run_deleter(obj, DELETER_FLAG_BOTH) };
    } else if before & STRONG_MASK == STRONG_ONE {
        fence(Ordering::Acquire);
        // SAFETY: no strong reference is left; weak ones keep the memory.
        unsafe { run_deleter(obj, DELETER_FLAG_STRONG) };
        // SAFETY: the strong side's implicit weak reference is given up here.
        unsafe { dec_weak(obj) };
    }
}

/// # Safety
/// `obj` points at a header whose memory is live and the caller owns one weak reference.
unsafe fn dec_weak(obj: NonNull<DVMObject>) {
    // SAFETY: the caller's weak reference keeps the memory.
    let header = unsafe { obj.as_ref() };
    if header
        .combined_ref_count
        .fetch_sub(WEAK_ONE, Ordering::Release)
        == WEAK_ONE
    {
        fence(Ordering::Acquire);
        // SAFETY: no reference of either kind is left.
        unsafe { run_deleter(obj, DELETER_FLAG_WEAK) };
    }
}

/// # Safety
/// The protocol above says this deleter call is due.
unsafe fn run_deleter(obj: NonNull<DVMObject>, flags: i32) {
    // SAFETY: the header is live until the deleter frees it.
    if let Some(deleter) = unsafe { obj.as_ref() }.deleter {
        // SAFETY: the object's own deleter, called as the protocol prescribes.
        unsafe { deleter(obj.as_ptr().cast(), flags) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    /// Counts drops of the body, so tests see when the destructor ran.
    struct Probe(Arc<AtomicUsize>);
    impl Drop for Probe {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn probe() -> (ObjectRef<Probe>, Arc<AtomicUsize>) {
        let drops = Arc::new(AtomicUsize::new(0));
        (
            alloc_object(crate::abi::type_index::OBJECT, Probe(drops.clone())),
            drops,
        )
    }

    fn combined(object: &ObjectRef<Probe>) -> u64 {
        object.header().combined_ref_count.load(Ordering::SeqCst)
    }

    #[test]
    fn new_objects_start_with_one_strong_and_one_weak() {
        let (object, _) = probe();
        assert_eq!(combined(&object), 0x1_0000_0001);
        assert_eq!(object.header().__padding, 0);
    }

    #[test]
    fn strong_references_count_and_the_last_one_destroys() {
        let (object, drops) = probe();
        let second = object.clone();
        assert_eq!(combined(&object), 0x1_0000_0002);
        drop(object);
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        assert_eq!(second.strong_count(), 1);
        drop(second);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn weak_references_keep_memory_not_the_value() {
        let (object, drops) = probe();
        let weak = object.downgrade();
        assert_eq!(combined(&object), 0x2_0000_0001);
        let upgraded = weak
            .upgrade()
            .expect("alive while a strong reference exists");
        assert_eq!(upgraded.strong_count(), 2);
        drop(upgraded);
        drop(object);
        // Destroyed (flag 1), memory kept for the weak reference.
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        assert!(weak.upgrade().is_none());
        let weak2 = weak.clone();
        drop(weak);
        assert!(weak2.upgrade().is_none());
        drop(weak2); // frees the memory (flag 2); Miri or ASan would flag a leak or double free
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn deleter_flags_follow_the_protocol() {
        static FLAGS: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());
        unsafe extern "C" fn record(obj: *mut c_void, flags: i32) {
            FLAGS.lock().unwrap().push(flags);
            if flags & DELETER_FLAG_WEAK != 0 {
                // SAFETY: allocated by Box in this test.
                drop(unsafe { Box::from_raw(obj.cast::<DVMObject>()) });
            }
        }
        let make = || {
            let header = Box::new(DVMObject {
                combined_ref_count: AtomicU64::new(BOTH_ONE),
                type_index: crate::abi::type_index::OBJECT,
                __padding: 0,
                deleter: Some(record),
            });
            // SAFETY: a fresh object with one strong reference.
            unsafe { ObjectRef::<AnyObject>::from_raw(NonNull::from(Box::leak(header))) }
        };
        drop(make());
        assert_eq!(*FLAGS.lock().unwrap(), vec![DELETER_FLAG_BOTH]);
        FLAGS.lock().unwrap().clear();
        let object = make();
        let weak = object.downgrade();
        drop(object);
        assert_eq!(*FLAGS.lock().unwrap(), vec![DELETER_FLAG_STRONG]);
        drop(weak);
        assert_eq!(
            *FLAGS.lock().unwrap(),
            vec![DELETER_FLAG_STRONG, DELETER_FLAG_WEAK]
        );
    }

    #[test]
    fn concurrent_clones_and_drops_destroy_exactly_once() {
        let (object, drops) = probe();
        std::thread::scope(|scope| {
            for _ in 0..8 {
                let mine = object.clone();
                let weak = object.downgrade();
                scope.spawn(move || {
                    for _ in 0..10_000 {
                        let a = mine.clone();
                        let b = weak.upgrade().unwrap();
                        drop((a, b));
                    }
                });
            }
        });
        assert_eq!(combined(&object), 0x1_0000_0001);
        drop(object);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }
}
