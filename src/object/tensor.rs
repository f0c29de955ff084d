//! Tensor objects: a DLTensor after the object header, owning host memory or a DLPack tensor.

use std::any::Any as StdAny;
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::OnceLock;

use super::any::Any;
use super::error::{Error, ErrorKind, Result};
use super::host_memory::host_alloc_for_overwrite;
pub use super::host_memory::{host_alloc, host_free};
use super::object_ref::{ObjectRef, alloc_object_with, delete_boxed, object_cell};
use crate::abi::{
    DLDataType, DLDevice, DLManagedTensorVersioned, DLPACK_FLAG_BITMASK_READ_ONLY,
    DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION, DLPackVersion, DLTensor, DVMDeleter, KDL_BOOL,
    KDL_CPU, KDL_LAST_TYPE_CODE, type_index as ti,
};

/// Host tensors are aligned to this many bytes.
pub const HOST_ALIGNMENT: usize = 64;
/// The most dimensions a tensor may have.
pub const MAX_NDIM: i32 = 64;

object_cell! {
    /// The cell of a Tensor object (type 70): a DLTensor.
    TensorCell(DLTensor) = ti::TENSOR
}

impl TensorCell {
    /// The DLTensor of any tensor object, also one another library made.
    pub fn dl(&self) -> &DLTensor {
        &self.0
    }
}

/// The names of the dtype codes, by code (DLPack's order). The codes from 7 on name one
/// format each and say their bits in the name; the others take their bits after the name.
const CODE_NAMES: [&str; 18] = [
    "int",
    "uint",
    "float",
    "handle",
    "bfloat",
    "complex",
    "bool",
    "float8_e3m4",
    "float8_e4m3",
    "float8_e4m3b11fnuz",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float6_e2m3fn",
    "float6_e3m2fn",
    "float4_e2m1fn",
];

/// The first code whose format names its bits (`float8_e3m4`, ...).
const FIRST_NAMED_FORMAT: u8 = 7;

/// A readable dtype name: `float32`, `int8x4`, `bool`.
pub fn dtype_name(dtype: DLDataType) -> String {
    let base = match CODE_NAMES.get(usize::from(dtype.code)) {
        Some(&"bool") if dtype.bits == 8 => "bool".to_string(),
        Some(name) if dtype.code >= FIRST_NAMED_FORMAT => (*name).to_string(),
        Some(name) => format!("{name}{}", dtype.bits),
        None => format!("dtype(code={}, bits={})", dtype.code, dtype.bits),
    };
    if dtype.lanes > 1 {
        format!("{base}x{}", dtype.lanes)
    } else {
        base
    }
}

/// The dtype `name` names, as [`dtype_name`] writes it (and TVM, NumPy and tvm-ffi spell it):
/// `float32`, `bfloat16`, `uint8`, `bool`, `float8_e4m3fn`, `float16x2`.
///
/// Errors: `ValueError` naming `name` when it names no dtype.
pub fn parse_dtype(name: &str) -> Result<DLDataType> {
    let lanes_apart = || {
        let (base, lanes) = name.rsplit_once('x')?;
        let digits = !lanes.is_empty() && lanes.bytes().all(|b| b.is_ascii_digit());
        Some((
            base,
            lanes.parse::<u16>().ok().filter(|&l| digits && l > 0)?,
        ))
    };
    let (base, lanes) = match parse_base(name) {
        Some(_) => (name, 1),
        None => lanes_apart().ok_or_else(|| Error::value(format!("`{name}` names no dtype")))?,
    };
    let (code, bits) =
        parse_base(base).ok_or_else(|| Error::value(format!("`{name}` names no dtype")))?;
    Ok(DLDataType::new(code, bits, lanes))
}

/// The code and bits of a dtype name without lanes.
fn parse_base(base: &str) -> Option<(u8, u8)> {
    if base == "bool" {
        return Some((KDL_BOOL, 8));
    }
    let at = CODE_NAMES.iter().position(|&n| n == base);
    if let Some(code) = at.filter(|&c| c >= usize::from(FIRST_NAMED_FORMAT)) {
        // The bits are the digits after `float`: float8_e4m3fn holds 8.
        let bits = base["float".len()..base.find('_')?].parse().ok()?;
        return Some((code as u8, bits));
    }
    CODE_NAMES[..usize::from(FIRST_NAMED_FORMAT)]
        .iter()
        .enumerate()
        .find_map(|(code, prefix)| {
            let bits = base.strip_prefix(prefix)?;
            let digits = !bits.is_empty() && bits.bytes().all(|b| b.is_ascii_digit());
            let bits = bits
                .parse::<u8>()
                .ok()
                .filter(|b| digits && b.is_power_of_two())?;
            Some((code as u8, bits))
        })
}

fn check_dtype(dtype: DLDataType) -> Result<()> {
    if dtype.code > KDL_LAST_TYPE_CODE || dtype.bits == 0 || dtype.lanes == 0 {
        return Err(Error::value(format!(
            "invalid dtype (code {}, bits {}, lanes {})",
            dtype.code, dtype.bits, dtype.lanes
        )));
    }
    Ok(())
}

fn too_large(dims: &[i64], dtype: DLDataType) -> Error {
    Error::value(format!(
        "tensor of shape {dims:?} and dtype {} is too large to address",
        dtype_name(dtype)
    ))
}

/// Bytes of a compact tensor of this shape and dtype; sub-byte dtypes round up. The product
/// of the nonzero dims must be addressable too, even when a zero dim leaves no element: the
/// tensor's row-major strides are products of its trailing dims.
pub fn compact_nbytes(dims: &[i64], dtype: DLDataType) -> Result<usize> {
    check_dtype(dtype)?;
    let mut extent: u64 = 1;
    let mut empty = false;
    for (axis, &dim) in dims.iter().enumerate() {
        let dim = u64::try_from(dim)
            .map_err(|_| Error::value(format!("dimension {axis} of shape {dims:?} is negative")))?;
        empty |= dim == 0;
        extent = extent
            .checked_mul(dim.max(1))
            .filter(|&e| e <= i64::MAX as u64)
            .ok_or_else(|| too_large(dims, dtype))?;
    }
    let element_bits = u64::from(dtype.bits) * u64::from(dtype.lanes);
    let extent_bytes = extent
        .checked_mul(element_bits)
        .map(|bits| bits.div_ceil(8))
        .and_then(|bytes| usize::try_from(bytes).ok())
        .filter(|&b| b <= isize::MAX as usize - HOST_ALIGNMENT)
        .ok_or_else(|| too_large(dims, dtype))?;
    Ok(if empty { 0 } else { extent_bytes })
}

/// The shape of a DLTensor, after checking `ndim` and the pointer.
///
/// # Safety
/// `dl.shape` points at `dl.ndim` dims when `ndim > 0`.
pub unsafe fn dl_shape(dl: &DLTensor) -> Result<&[i64]> {
    if !(0..=MAX_NDIM).contains(&dl.ndim) {
        return Err(Error::value(format!(
            "ndim {} is out of range (0..={MAX_NDIM})",
            dl.ndim
        )));
    }
    if dl.ndim == 0 {
        return Ok(&[]);
    }
    if dl.shape.is_null() {
        return Err(Error::value(format!(
            "shape is NULL but ndim is {}",
            dl.ndim
        )));
    }
    // SAFETY: the caller vouches for `ndim` dims.
    Ok(unsafe { std::slice::from_raw_parts(dl.shape, dl.ndim as usize) })
}

/// Checks a DLTensor's description and returns the bytes its elements span. The span, after
/// the byte offset, must fit in the address space.
///
/// # Safety
/// `dl.shape` and `dl.strides` (when not NULL) point at `dl.ndim` values each.
pub unsafe fn check_dltensor(dl: &DLTensor) -> Result<usize> {
    // SAFETY: the caller vouches for the arrays.
    let dims = unsafe { dl_shape(dl) }?;
    // SAFETY: as above.
    let span = unsafe { span(dl, dims) }?;
    if span > 0 {
        if dl.data.is_null() {
            return Err(Error::value(format!(
                "data is NULL for a tensor of shape {dims:?}"
            )));
        }
        let end = usize::try_from(dl.byte_offset)
            .ok()
            .and_then(|offset| (dl.data as usize).checked_add(offset))
            .and_then(|first| first.checked_add(span));
        if end.is_none() {
            return Err(Error::value(format!(
                "byte_offset {} puts the {span} bytes of a tensor of shape {dims:?} past the \
                 end of the address space",
                dl.byte_offset
            )));
        }
    }
    Ok(span)
}

/// The bytes a described tensor's elements span, from its first element.
///
/// # Safety
/// `dl.strides`, when not NULL, points at `dims.len()` values.
unsafe fn span(dl: &DLTensor, dims: &[i64]) -> Result<usize> {
    let compact = compact_nbytes(dims, dl.dtype)?;
    if dl.strides.is_null() || compact == 0 {
        return Ok(compact);
    }
    // SAFETY: as above; strides are counted in elements.
    let strides = unsafe { std::slice::from_raw_parts(dl.strides, dims.len()) };
    let mut last: u64 = 0;
    for (axis, (&dim, &stride)) in dims.iter().zip(strides).enumerate() {
        let stride = u64::try_from(stride).map_err(|_| {
            Error::value(format!(
                "stride {stride} of axis {axis} is negative (unsupported)"
            ))
        })?;
        let reach = (dim as u64 - 1)
            .checked_mul(stride)
            .ok_or_else(|| too_large(dims, dl.dtype))?;
        last = last
            .checked_add(reach)
            .ok_or_else(|| too_large(dims, dl.dtype))?;
    }
    let element_bits = u64::from(dl.dtype.bits) * u64::from(dl.dtype.lanes);
    last.checked_add(1)
        .and_then(|elements| elements.checked_mul(element_bits))
        .map(|bits| bits.div_ceil(8))
        .and_then(|bytes| usize::try_from(bytes).ok())
        .filter(|&bytes| bytes <= isize::MAX as usize)
        .ok_or_else(|| too_large(dims, dl.dtype))
}

/// Whether the DLTensor is compact row-major (NULL strides, or strides that say so).
///
/// # Safety
/// As for [`check_dltensor`].
pub unsafe fn is_contiguous(dl: &DLTensor) -> bool {
    if dl.strides.is_null() || dl.ndim <= 0 {
        return true;
    }
    // SAFETY: the caller vouches for the arrays.
    let (dims, strides) = unsafe {
        (
            std::slice::from_raw_parts(dl.shape, dl.ndim as usize),
            std::slice::from_raw_parts(dl.strides, dl.ndim as usize),
        )
    };
    let mut expected = 1i64;
    for (&dim, &stride) in dims.iter().zip(strides).rev() {
        if dim != 1 && stride != expected {
            return false;
        }
        expected = expected.saturating_mul(dim);
    }
    true
}

fn row_major_strides(dims: &[i64]) -> Vec<i64> {
    let mut strides = vec![1i64; dims.len()];
    for axis in (0..dims.len().saturating_sub(1)).rev() {
        strides[axis] = strides[axis + 1] * dims[axis + 1];
    }
    strides
}

/// Frees a tensor's memory when the tensor dies (a device backend's free).
pub type Release = Box<dyn FnOnce() + Send + Sync>;

/// What a tensor object owns besides its description.
enum Storage {
    /// Memory an allocator gave, or another library's tensor object; `release` gives it back.
    Owned(Option<Release>),
    Managed(NonNull<DLManagedTensorVersioned>),
}

/// A [`Release`] that hands `ptr` to `free` (on whichever thread the tensor dies).
pub fn release_with(
    ptr: NonNull<u8>,
    free: impl FnOnce(NonNull<u8>) + Send + Sync + 'static,
) -> Release {
    // Carried as an address: the memory belongs to the tensor, whichever thread drops it.
    let address = ptr.as_ptr().expose_provenance();
    Box::new(move || {
        if let Some(ptr) = NonNull::new(std::ptr::with_exposed_provenance_mut::<u8>(address)) {
            free(ptr);
        }
    })
}

/// Checks a shape and dtype for a new compact tensor and returns its size in bytes.
pub fn check_new(dims: &[i64], dtype: DLDataType) -> Result<usize> {
    if dims.len() > MAX_NDIM as usize {
        return Err(Error::value(format!(
            "ndim {} exceeds {MAX_NDIM}: the shape has too many dimensions",
            dims.len()
        )));
    }
    compact_nbytes(dims, dtype)
}

impl Drop for Storage {
    fn drop(&mut self) {
        match self {
            Storage::Owned(release) => {
                if let Some(release) = release.take() {
                    release();
                }
            }
            Storage::Managed(managed) => {
                // SAFETY: we took ownership of the managed tensor; its deleter releases it.
                if let Some(deleter) = unsafe { managed.as_ref() }.deleter {
                    // SAFETY: called once, as DLPack prescribes.
                    unsafe { deleter(managed.as_ptr()) };
                }
            }
        }
    }
}

#[repr(C)]
struct TensorBody {
    dl: DLTensor,
    shape: Vec<i64>,
    strides: Vec<i64>,
    storage: Storage,
    /// The producer marked the memory read-only (a DLPack flag).
    read_only: bool,
    /// State a layer above keeps per tensor (the VM's dependence record), made on first use.
    extension: OnceLock<Box<dyn StdAny + Send + Sync>>,
}

/// The deleter of every tensor object this library makes. An object of type 70 with another
/// deleter was made elsewhere: only its DLTensor cell is known, not what follows it here.
/// Never inlined, so that it has one address to compare.
#[inline(never)]
unsafe extern "C" fn delete_tensor(obj: *mut c_void, flags: i32) {
    // SAFETY: only tensors made by `Tensor::assemble` carry this deleter.
    unsafe { delete_boxed::<TensorBody>(obj, flags) }
}

/// A Tensor value (a tensor object this library made; see [`Tensor::from_object`]).
#[derive(Clone, Debug)]
pub struct Tensor(ObjectRef<TensorCell>);

impl Tensor {
    pub const TYPE_NAME: &'static str = "ffi.Tensor";

    /// A compact, zero-filled host tensor, 64-byte aligned. (Tensors on any device with a
    /// backend: `device::empty`.)
    pub fn empty(dims: &[i64], dtype: DLDataType, device: DLDevice) -> Result<Tensor> {
        if device.device_type != KDL_CPU {
            return Err(Error::new(
                ErrorKind::DeviceUnavailable,
                format!(
                    "Tensor::empty makes host tensors; device type {} needs its backend",
                    device.device_type
                ),
            ));
        }
        let nbytes = check_new(dims, dtype)?;
        // SAFETY: zeroed host memory of `nbytes`.
        Ok(unsafe { Self::on_host(dims, dtype, device, nbytes, host_alloc(nbytes)?) })
    }

    /// A compact host tensor holding a copy of `data`, which must be exactly its size.
    ///
    /// Errors: `ValueError` for a bad shape or dtype, or `data` of another length.
    pub fn copy_of(dims: &[i64], dtype: DLDataType, data: &[u8]) -> Result<Tensor> {
        let nbytes = check_new(dims, dtype)?;
        if data.len() != nbytes {
            return Err(Error::value(format!(
                "{} bytes cannot fill a tensor of shape {dims:?} and dtype {}, which holds \
                 {nbytes}",
                data.len(),
                dtype_name(dtype)
            )));
        }
        let ptr = host_alloc_for_overwrite(nbytes)?;
        // SAFETY: fresh memory of at least `nbytes` bytes, apart from `data`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr.as_ptr(), nbytes) };
        // SAFETY: host memory of `nbytes`, all written above.
        Ok(unsafe { Self::on_host(dims, dtype, DLDevice::cpu(), nbytes, ptr) })
    }

    /// A compact tensor on host `device` over `ptr`, from `host_alloc(nbytes)` or
    /// `host_alloc_for_overwrite(nbytes)`, freed when the tensor dies.
    ///
    /// # Safety
    /// `ptr` is such memory, written or zeroed, and the tensor's from now on.
    unsafe fn on_host(
        dims: &[i64],
        dtype: DLDataType,
        device: DLDevice,
        nbytes: usize,
        ptr: NonNull<u8>,
    ) -> Tensor {
        let release = release_with(ptr, move |ptr| {
            // SAFETY: from `host_alloc(nbytes)`; the tensor that owned it is gone.
            unsafe { host_free(ptr, nbytes) }
        });
        // SAFETY: host memory of `nbytes`, given back by `host_free` when the tensor dies.
        unsafe { Self::from_memory(dims, dtype, device, ptr, release) }
    }

    /// A compact tensor over memory an allocator gave; `release` runs when the tensor dies.
    ///
    /// # Safety
    /// `data` holds `check_new(dims, dtype)` bytes (checked by the caller) on `device`, owned by
    /// the tensor from now on.
    pub unsafe fn from_memory(
        dims: &[i64],
        dtype: DLDataType,
        device: DLDevice,
        data: NonNull<u8>,
        release: Release,
    ) -> Tensor {
        let shape: Vec<i64> = dims.into();
        let strides = row_major_strides(dims);
        Self::assemble(
            data.as_ptr().cast(),
            device,
            dtype,
            shape,
            strides,
            Storage::Owned(Some(release)),
            false,
        )
    }

    fn assemble(
        data: *mut c_void,
        device: DLDevice,
        dtype: DLDataType,
        mut shape: Vec<i64>,
        mut strides: Vec<i64>,
        storage: Storage,
        read_only: bool,
    ) -> Tensor {
        let ndim = shape.len() as i32;
        let dl = DLTensor {
            data,
            device,
            ndim,
            dtype,
            shape: if ndim > 0 {
                shape.as_mut_ptr()
            } else {
                std::ptr::null_mut()
            },
            strides: if ndim > 0 {
                strides.as_mut_ptr()
            } else {
                std::ptr::null_mut()
            },
            byte_offset: 0,
        };
        let body = TensorBody {
            dl,
            shape,
            strides,
            storage,
            read_only,
            extension: OnceLock::new(),
        };
        // SAFETY: `delete_tensor` deletes TensorBody objects; TensorBody starts with the
        // DLTensor cell.
        Tensor(unsafe { alloc_object_with(ti::TENSOR, body, delete_tensor).cast() })
    }

    /// Takes ownership of a DLPack tensor. On error nothing is taken: the caller still owns it.
    ///
    /// # Safety
    /// `managed` points at a valid `DLManagedTensorVersioned` whose deleter may run on any thread.
    pub unsafe fn from_dlpack(managed: NonNull<DLManagedTensorVersioned>) -> Result<Tensor> {
        // SAFETY: the caller vouches for the managed tensor.
        let mt = unsafe { managed.as_ref() };
        if mt.version.major != DLPACK_MAJOR_VERSION {
            return Err(Error::value(format!(
                "DLPack major version {} is not supported (expected {DLPACK_MAJOR_VERSION})",
                mt.version.major
            )));
        }
        let read_only = mt.flags & DLPACK_FLAG_BITMASK_READ_ONLY != 0;
        // SAFETY: the managed tensor's description is valid while it lives.
        unsafe { Self::over(&mt.dl_tensor, read_only, || Storage::Managed(managed)) }
    }

    /// A tensor over the memory `dl` describes, owning what `storage` gives (made only once the
    /// description passed its checks).
    ///
    /// # Safety
    /// `dl`'s shape and strides are readable, and its memory stays valid while the storage
    /// lives.
    unsafe fn over(
        dl: &DLTensor,
        read_only: bool,
        storage: impl FnOnce() -> Storage,
    ) -> Result<Tensor> {
        // SAFETY: the caller vouches for the arrays.
        unsafe { check_dltensor(dl) }?;
        // SAFETY: checked above: `ndim` dims (and strides, if any) are readable.
        let shape: Vec<i64> = unsafe { dl_shape(dl) }?.into();
        let strides = if dl.strides.is_null() {
            row_major_strides(&shape)
        } else {
            // SAFETY: as above.
            unsafe { std::slice::from_raw_parts(dl.strides, shape.len()) }.into()
        };
        // The first element's address (checked above to fit in the address space when the
        // tensor has elements; an empty tensor's is never dereferenced).
        let data = dl
            .data
            .cast::<u8>()
            .wrapping_add(dl.byte_offset as usize)
            .cast();
        Ok(Self::assemble(
            data,
            dl.device,
            dl.dtype,
            shape,
            strides,
            storage(),
            read_only,
        ))
    }

    /// Exports the tensor through DLPack; the consumer calls the deleter when done.
    pub fn to_dlpack(&self) -> NonNull<DLManagedTensorVersioned> {
        #[repr(C)]
        struct Export {
            managed: DLManagedTensorVersioned,
            keep: Tensor,
        }
        unsafe extern "C" fn release(managed: *mut DLManagedTensorVersioned) {
            // SAFETY: `managed` is the first field of an Export made by Box below.
            drop(unsafe { Box::from_raw(managed.cast::<Export>()) });
        }
        let managed = DLManagedTensorVersioned {
            version: DLPackVersion {
                major: DLPACK_MAJOR_VERSION,
                minor: DLPACK_MINOR_VERSION,
            },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(release),
            flags: 0,
            dl_tensor: *self.dl(),
        };
        let export = Box::new(Export {
            managed,
            keep: self.clone(),
        });
        NonNull::from(Box::leak(export)).cast()
    }

    /// The tensor a tensor object holds. One this library made is used as it is; one another
    /// library made (tvm-ffi's, for a numpy array) is imported: a new tensor over the same
    /// memory that keeps the other alive. Fails if the other's description is invalid.
    pub fn from_object(object: ObjectRef<TensorCell>) -> Result<Tensor> {
        if Self::is_native(&object) {
            return Ok(Tensor(object));
        }
        let dl = object.0;
        // The other library frees its own tensor when the reference goes.
        let object = object.erase();
        let release: Release = Box::new(move || drop(object));
        // SAFETY: a live tensor object's description is readable, and its memory valid, while
        // it lives; the storage keeps it alive.
        unsafe { Self::over(&dl, false, || Storage::Owned(Some(release))) }
    }

    /// Whether this library made the tensor object (only those carry the state streams use to
    /// order their uses).
    pub fn is_native(object: &ObjectRef<TensorCell>) -> bool {
        object
            .deleter()
            .is_some_and(|deleter| std::ptr::fn_addr_eq(deleter, delete_tensor as DVMDeleter))
    }

    pub fn into_object(self) -> ObjectRef<TensorCell> {
        self.0
    }

    pub fn object(&self) -> &ObjectRef<TensorCell> {
        &self.0
    }

    /// The DLTensor, valid while this tensor lives.
    pub fn dl(&self) -> &DLTensor {
        &self.0.0
    }

    pub fn shape(&self) -> &[i64] {
        // SAFETY: a live tensor's description is consistent (checked when it was made).
        unsafe { dl_shape(self.dl()) }.unwrap_or(&[])
    }

    /// Bytes the elements occupy when compact.
    pub fn nbytes(&self) -> usize {
        compact_nbytes(self.shape(), self.dl().dtype).unwrap_or(0)
    }

    pub fn is_contiguous(&self) -> bool {
        // SAFETY: as in `shape`.
        unsafe { is_contiguous(self.dl()) }
    }

    /// The strides in elements (row-major ones when the tensor is compact).
    pub fn strides(&self) -> &[i64] {
        &self.body().strides
    }

    /// Whether the producer marked the memory read-only (DLPack's read-only flag): the VM
    /// refuses to write it.
    pub fn is_read_only(&self) -> bool {
        self.body().read_only
    }

    /// The address of the first element.
    pub fn data_ptr(&self) -> *mut u8 {
        let dl = self.dl();
        dl.data.cast::<u8>().wrapping_add(dl.byte_offset as usize)
    }

    /// Whether both values refer to the same tensor object.
    pub fn same(&self, other: &Tensor) -> bool {
        self.0.as_ptr() == other.0.as_ptr()
    }

    fn body(&self) -> &TensorBody {
        // SAFETY: tensors made by this library are `TensorBody` cells (their DLTensor first)
        // right after the header; handles of type 70 reach here only from this library's own
        // constructors. The pointer comes from the whole object, not from its DLTensor field,
        // whose reference reaches only that field's bytes.
        unsafe {
            &*self
                .0
                .as_ptr()
                .cast::<u8>()
                .add(crate::abi::OBJECT_HEADER_SIZE)
                .cast::<TensorBody>()
        }
    }

    /// The per-tensor state of type `T` a layer above keeps, made by `T::default()` on first
    /// use. One type per tensor: the first caller's type wins, and another type panics.
    pub fn extension<T: Default + Send + Sync + 'static>(&self) -> &T {
        self.body()
            .extension
            .get_or_init(|| Box::new(T::default()))
            .downcast_ref::<T>()
            .expect("a tensor extension holds one type")
    }
}

impl From<Tensor> for Any {
    fn from(t: Tensor) -> Any {
        Any::from(t.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{KDL_FLOAT, KDL_INT};

    const F32: DLDataType = DLDataType::new(KDL_FLOAT, 32, 1);

    #[test]
    fn dtype_names_parse_back_to_their_dtypes() {
        for code in 0..=KDL_LAST_TYPE_CODE {
            let bits = match code {
                KDL_BOOL => 8,
                c if c >= FIRST_NAMED_FORMAT => CODE_NAMES[usize::from(c)][5..6].parse().unwrap(),
                _ => 16,
            };
            for lanes in [1, 4] {
                let dtype = DLDataType::new(code, bits, lanes);
                assert_eq!(parse_dtype(&dtype_name(dtype)).unwrap(), dtype);
            }
        }
        assert_eq!(
            parse_dtype("bool").unwrap(),
            DLDataType::new(KDL_BOOL, 8, 1)
        );
        assert_eq!(parse_dtype("float32").unwrap(), F32);
        assert_eq!(parse_dtype("uint8").unwrap(), DLDataType::new(1, 8, 1));
        for bad in [
            "",
            "float",
            "float0",
            "float33",
            "int8x0",
            "f32",
            "int-8",
            "float32x",
            "bfloat16y",
        ] {
            let err = parse_dtype(bad).unwrap_err();
            assert_eq!(err.kind, ErrorKind::Value, "{bad}");
            assert_eq!(err.message, format!("`{bad}` names no dtype"));
        }
    }

    #[test]
    fn empty_tensors_are_aligned_compact_and_zeroed() {
        // Small ones from the allocator, large ones (from 2 MiB) mapped on their own.
        for dims in [[2, 3], [3, (1 << 20) / 3 + 1]] {
            let t = Tensor::empty(&dims, F32, DLDevice::cpu()).unwrap();
            let dl = t.dl();
            assert_eq!(dl.data as usize % HOST_ALIGNMENT, 0);
            assert_eq!(t.shape(), &dims);
            assert!(t.is_contiguous());
            let nbytes = (dims[0] * dims[1] * 4) as usize;
            assert_eq!(t.nbytes(), nbytes);
            // SAFETY: the tensor owns `nbytes` bytes, and nothing else uses them.
            let bytes = unsafe { std::slice::from_raw_parts_mut(dl.data.cast::<u8>(), nbytes) };
            assert!(bytes.iter().all(|&b| b == 0));
            bytes.fill(7);
        }
    }

    #[test]
    fn a_copy_holds_the_bytes_it_was_given_and_only_as_many_as_it_holds() {
        for n in [6, 3 << 20] {
            let data: Vec<u8> = (0..n * 4).map(|i| (i % 251) as u8).collect();
            let t = Tensor::copy_of(&[n as i64], F32, &data).unwrap();
            assert_eq!(t.dl().data as usize % HOST_ALIGNMENT, 0);
            // SAFETY: the tensor owns `data.len()` readable bytes.
            let held = unsafe { std::slice::from_raw_parts(t.data_ptr(), data.len()) };
            assert!(held == &data[..]);
        }
        let err = Tensor::copy_of(&[2, 3], F32, &[0; 20]).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Value);
        assert!(err.message.contains("20 bytes"), "{}", err.message);
        assert!(err.message.contains("holds 24"), "{}", err.message);
    }

    #[test]
    fn overflowing_and_invalid_shapes_are_value_errors() {
        let err = Tensor::empty(&[i64::MAX, 4], F32, DLDevice::cpu()).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Value);
        assert!(err.message.contains("too large"), "{}", err.message);
        let err = Tensor::empty(&[2, -1], F32, DLDevice::cpu()).unwrap_err();
        assert_eq!(err.message, "dimension 1 of shape [2, -1] is negative");
        let err = Tensor::empty(&[2], DLDataType::new(KDL_INT, 0, 1), DLDevice::cpu()).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Value);
        let gpu = DLDevice {
            device_type: 2,
            device_id: 0,
        };
        assert_eq!(
            Tensor::empty(&[2], F32, gpu).unwrap_err().kind,
            ErrorKind::DeviceUnavailable
        );
    }

    #[test]
    fn empty_tensors_with_unaddressable_dims_are_value_errors() {
        // No element, but row-major strides would overflow: numpy refuses this shape too.
        let err = compact_nbytes(&[0, i64::MAX, i64::MAX], F32).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Value);
        assert!(err.message.contains("too large"), "{}", err.message);
        let err = Tensor::empty(&[0, 1 << 40, 1 << 40], F32, DLDevice::cpu()).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Value);
        // Empty tensors whose other dims multiply to an addressable extent are fine.
        let t = Tensor::empty(&[3, 0, 1 << 20], F32, DLDevice::cpu()).unwrap();
        assert_eq!((t.nbytes(), t.strides()), (0, &[0, 1 << 20, 1][..]));
    }

    #[test]
    fn sub_byte_dtypes_round_up() {
        let int4 = DLDataType::new(KDL_INT, 4, 1);
        assert_eq!(compact_nbytes(&[3], int4).unwrap(), 2);
        assert_eq!(dtype_name(int4), "int4");
        assert_eq!(dtype_name(DLDataType::new(KDL_FLOAT, 16, 4)), "float16x4");
    }

    #[test]
    fn dlpack_round_trip_keeps_the_data_and_releases_once() {
        let t = Tensor::empty(&[4], F32, DLDevice::cpu()).unwrap();
        let managed = t.to_dlpack();
        assert_eq!(t.object().strong_count(), 2);
        // SAFETY: the export is a valid managed tensor; ownership passes to `back`.
        let back = unsafe { Tensor::from_dlpack(managed) }.unwrap();
        assert_eq!(back.dl().data, t.dl().data);
        assert_eq!(back.shape(), &[4]);
        drop(back);
        assert_eq!(t.object().strong_count(), 1);
    }

    #[test]
    fn tensor_objects_made_elsewhere_are_imported_over_the_same_memory() {
        // Another library's tensor: a DLTensor cell followed by state this library knows
        // nothing of, deleted by that library's own deleter.
        #[repr(C)]
        struct Elsewhere {
            dl: DLTensor,
            shape: [i64; 2],
            data: [f32; 6],
        }
        let body = Elsewhere {
            dl: DLTensor {
                data: std::ptr::null_mut(),
                device: DLDevice::cpu(),
                ndim: 2,
                dtype: F32,
                shape: std::ptr::null_mut(),
                strides: std::ptr::null_mut(),
                byte_offset: 4,
            },
            shape: [2, 2],
            data: [0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
        };
        // SAFETY: Elsewhere starts with the DLTensor cell.
        let object: ObjectRef<TensorCell> =
            unsafe { crate::object::alloc_object(ti::TENSOR, body).cast() };
        // SAFETY: the object's cell is an Elsewhere no one else uses yet; its arrays stay put.
        let first = unsafe {
            let body = &mut *object
                .as_ptr()
                .cast::<u8>()
                .add(crate::abi::OBJECT_HEADER_SIZE)
                .cast::<Elsewhere>();
            body.dl.shape = body.shape.as_mut_ptr();
            body.dl.data = body.data.as_mut_ptr().cast();
            body.data.as_ptr().add(1).cast::<u8>()
        };
        assert!(!Tensor::is_native(&object));
        let imported = Tensor::from_object(object.clone()).unwrap();
        assert!(Tensor::is_native(imported.object()));
        assert_eq!(imported.shape(), &[2, 2]);
        assert_eq!(imported.data_ptr().cast_const(), first);
        assert_eq!(imported.strides(), &[2, 1]);
        assert_eq!(
            object.strong_count(),
            2,
            "the import keeps the original alive"
        );
        drop(imported);
        assert_eq!(object.strong_count(), 1);
        let mine = Tensor::empty(&[1], F32, DLDevice::cpu()).unwrap();
        let again = Tensor::from_object(mine.object().clone()).unwrap();
        assert!(again.same(&mine), "tensors made here are used as they are");
    }

    #[test]
    fn spans_and_offsets_past_the_address_space_are_value_errors() {
        let mut data = [0f32; 8];
        let mut shape = [2i64, 2, 2];
        let mut strides = [i64::MAX, i64::MAX, 1];
        let mut dl = DLTensor {
            data: data.as_mut_ptr().cast(),
            device: DLDevice::cpu(),
            ndim: 3,
            dtype: F32,
            shape: shape.as_mut_ptr(),
            strides: strides.as_mut_ptr(),
            byte_offset: 0,
        };
        // The last element sits 2^64 - 1 elements past the first.
        // SAFETY: the arrays above outlive the checks.
        let err = unsafe { check_dltensor(&dl) }.unwrap_err();
        assert!(err.message.contains("too large"), "{}", err.message);
        dl.strides = std::ptr::null_mut();
        dl.byte_offset = u64::MAX - 3;
        // SAFETY: as above.
        let err = unsafe { check_dltensor(&dl) }.unwrap_err();
        assert_eq!(err.kind, ErrorKind::Value);
        assert!(err.message.contains("past the end"), "{}", err.message);
        // An empty tensor's offset is never used to reach an element.
        // SAFETY: as above; the shape array is rewritten in place.
        unsafe {
            dl.shape.write(0);
            assert_eq!(check_dltensor(&dl).unwrap(), 0);
        }
    }

    #[test]
    fn strided_views_are_checked() {
        let mut shape = [2i64, 3];
        let mut strides = [1i64, 2];
        let mut data = [0f32; 6];
        let dl = DLTensor {
            data: data.as_mut_ptr().cast(),
            device: DLDevice::cpu(),
            ndim: 2,
            dtype: F32,
            shape: shape.as_mut_ptr(),
            strides: strides.as_mut_ptr(),
            byte_offset: 0,
        };
        // SAFETY: the arrays above outlive the checks.
        unsafe {
            assert!(!is_contiguous(&dl));
            assert_eq!(check_dltensor(&dl).unwrap(), 24);
        }
        // SAFETY: as above; the strides array is rewritten in place.
        unsafe {
            dl.strides.write(3);
            dl.strides.add(1).write(1);
            assert!(is_contiguous(&dl));
        }
    }
}
