//! Element types and reductions of the CPU collectives. Reductions work in blocks that stay in
//! L1: each block of worker 0's input is widened into an accumulator, the other inputs are
//! folded in with one simple loop per operation (so the compiler vectorises it), and the result
//! is narrowed and written out, with streaming stores when the outputs are large. float16 and
//! bfloat16 accumulate in float32.

use std::mem::MaybeUninit;

use crate::abi::DLDataType;
use crate::object::tensor::dtype_name;
use crate::object::{Error, Result};

/// Disco's reduction kinds, in its encoding (`Shape([kind])`, 0..4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    Sum = 0,
    Prod = 1,
    Min = 2,
    Max = 3,
    Avg = 4,
}

impl ReduceOp {
    pub fn from_code(code: i64) -> Result<ReduceOp> {
        Ok(match code {
            0 => ReduceOp::Sum,
            1 => ReduceOp::Prod,
            2 => ReduceOp::Min,
            3 => ReduceOp::Max,
            4 => ReduceOp::Avg,
            other => {
                return Err(Error::value(format!(
                    "reduction kind {other} is not one of 0 (sum), 1 (prod), 2 (min), 3 (max), 4 (avg)"
                )));
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Avg => "avg",
        }
    }
}

/// The element types the collectives reduce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    I8,
    U8,
    I32,
    U32,
    I64,
    U64,
    F16,
    Bf16,
    F32,
    F64,
}

impl Elem {
    pub fn of(dtype: DLDataType) -> Result<Elem> {
        use crate::abi::{KDL_BFLOAT, KDL_FLOAT, KDL_INT, KDL_UINT};
        let elem = match (dtype.code, dtype.bits, dtype.lanes) {
            (KDL_INT, 8, 1) => Elem::I8,
            (KDL_UINT, 8, 1) => Elem::U8,
            (KDL_INT, 32, 1) => Elem::I32,
            (KDL_UINT, 32, 1) => Elem::U32,
            (KDL_INT, 64, 1) => Elem::I64,
            (KDL_UINT, 64, 1) => Elem::U64,
            (KDL_FLOAT, 16, 1) => Elem::F16,
            (KDL_BFLOAT, 16, 1) => Elem::Bf16,
            (KDL_FLOAT, 32, 1) => Elem::F32,
            (KDL_FLOAT, 64, 1) => Elem::F64,
            _ => {
                return Err(Error::type_error(format!(
                    "dtype {} is not supported by the CPU collectives (int8, uint8, int32, \
                     uint32, int64, uint64, float16, bfloat16, float32, float64)",
                    dtype_name(dtype)
                )));
            }
        };
        Ok(elem)
    }

    pub fn size(self) -> usize {
        match self {
            Elem::I8 | Elem::U8 => 1,
            Elem::F16 | Elem::Bf16 => 2,
            Elem::I32 | Elem::U32 | Elem::F32 => 4,
            Elem::I64 | Elem::U64 | Elem::F64 => 8,
        }
    }
}

/// Converts an IEEE half-precision value to f32 (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, _) => {
            // Subnormal: value = man * 2^-24, exact in f32.
            let v = man as f32 * f32::from_bits(0x3380_0000); // 2^-24
            return if sign != 0 { -v } else { v };
        }
        (0x1f, 0) => sign | 0x7f80_0000,
        (0x1f, _) => sign | 0x7fc0_0000 | (man << 13),
        _ => sign | ((exp + 112) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

/// Converts f32 to IEEE half precision, rounding to nearest even.
pub fn f32_to_f16(f: f32) -> u16 {
    let x = f.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let abs = x & 0x7fff_ffff;
    if abs >= 0x7f80_0000 {
        // Inf or NaN.
        let nan = if abs > 0x7f80_0000 { 0x200 } else { 0 };
        return sign | 0x7c00 | nan;
    }
    if abs >= 0x4780_0000 {
        // 65520 and above round to infinity.
        return sign | 0x7c00;
    }
    if abs < 0x3880_0000 {
        // Below the smallest normal half (2^-14): subnormal or zero. Scale so the half's
        // subnormal step (2^-24) becomes 1, and let f32 rounding (to nearest even) do the work.
        let v = f32::from_bits(abs) * f32::from_bits(0x4b80_0000); // 2^24
        return sign | (v.round_ties_even() as u16);
    }
    // Normal: rebias the exponent, round the 13 dropped bits to nearest even.
    let rebased = abs - (112 << 23);
    let half = (rebased >> 13) as u16;
    let rest = rebased & 0x1fff;
    let round_up = rest > 0x1000 || (rest == 0x1000 && half & 1 == 1);
    sign | (half + u16::from(round_up))
}

/// Converts a bfloat16 value to f32 (exact).
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// Converts f32 to bfloat16, rounding to nearest even (NaN stays NaN).
pub fn f32_to_bf16(f: f32) -> u16 {
    let x = f.to_bits();
    if f.is_nan() {
        return ((x >> 16) as u16) | 0x40;
    }
    let round = 0x7fff + ((x >> 16) & 1);
    (x.wrapping_add(round) >> 16) as u16
}

/// An element as stored, and how it widens into its accumulator.
trait Element: Copy + Default {
    type Acc: Accumulate;
    fn widen(self) -> Self::Acc;
    fn narrow(acc: Self::Acc) -> Self;
}

/// Arithmetic of an accumulator: wrapping for integers, IEEE for floats.
trait Accumulate: Copy + Default {
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn min(self, o: Self) -> Self;
    fn max(self, o: Self) -> Self;
    /// The sum divided by the number of workers (integers truncate).
    fn avg(self, n: usize) -> Self;
}

/// Integers and floats accumulate in their own type; they differ only in how they add and
/// multiply (integers wrap).
macro_rules! plain_elements {
    (add: $add:expr, mul: $mul:expr; $($t:ty),*) => {$(
        impl Accumulate for $t {
            #[inline(always)]
            fn add(self, o: Self) -> Self { ($add)(self, o) }
            #[inline(always)]
            fn mul(self, o: Self) -> Self { ($mul)(self, o) }
            #[inline(always)]
            fn min(self, o: Self) -> Self { if o < self { o } else { self } }
            #[inline(always)]
            fn max(self, o: Self) -> Self { if o > self { o } else { self } }
            #[inline(always)]
            fn avg(self, n: usize) -> Self { self / (n as $t) }
        }
        impl Element for $t {
            type Acc = $t;
            #[inline(always)]
            fn widen(self) -> $t { self }
            #[inline(always)]
            fn narrow(acc: $t) -> $t { acc }
        }
    )*};
}
plain_elements!(add: |a: Self, b| a.wrapping_add(b), mul: |a: Self, b| a.wrapping_mul(b);
    i8, u8, i32, u32, i64, u64);
plain_elements!(add: |a: Self, b| a + b, mul: |a: Self, b| a * b; f32, f64);

#[derive(Clone, Copy, Default)]
#[repr(transparent)]
struct Half(u16);

impl Element for Half {
    type Acc = f32;
    #[inline(always)]
    fn widen(self) -> f32 {
        f16_to_f32(self.0)
    }
    #[inline(always)]
    fn narrow(acc: f32) -> Half {
        Half(f32_to_f16(acc))
    }
}

#[derive(Clone, Copy, Default)]
#[repr(transparent)]
struct BHalf(u16);

impl Element for BHalf {
    type Acc = f32;
    #[inline(always)]
    fn widen(self) -> f32 {
        bf16_to_f32(self.0)
    }
    #[inline(always)]
    fn narrow(acc: f32) -> BHalf {
        BHalf(f32_to_bf16(acc))
    }
}

/// Elements per block: small enough that the accumulator stays in L1.
const BLOCK: usize = 1024;

/// A worker that writes at least this many bytes of outputs in one reduction writes them with
/// streaming stores: they would not stay in its caches anyway, and streaming stores skip
/// reading each line before overwriting it.
const STREAMING_BYTES: usize = 4 << 20;

/// Where a reduction reads and writes: element `i` of input `k` is at
/// `inputs[k] + i * size`; the result goes to every output at the same offset.
pub struct Buffers<'a> {
    pub inputs: &'a [usize],
    pub outputs: &'a [usize],
}

#[inline(always)]
fn fold<A: Accumulate, E: Element<Acc = A>>(acc: &mut [A], input: &[E], f: impl Fn(A, A) -> A) {
    for (a, x) in acc.iter_mut().zip(input) {
        *a = f(*a, x.widen());
    }
}

/// Reduces elements `lo..hi` of every input into every output.
///
/// # Safety
/// Every address in `buffers` points to at least `hi` elements of `E`, aligned for `E`; no
/// other thread writes elements `lo..hi` of any of them while this runs, and no other thread
/// reads elements `lo..hi` of an output (inputs and outputs may be the same memory).
unsafe fn reduce_range<E: Element>(op: ReduceOp, buffers: &Buffers<'_>, lo: usize, hi: usize) {
    let n = buffers.inputs.len();
    let streaming = (hi - lo) * size_of::<E>() * buffers.outputs.len() >= STREAMING_BYTES;
    let mut acc = [const { MaybeUninit::<E::Acc>::uninit() }; BLOCK];
    let mut out = [const { MaybeUninit::<E>::uninit() }; BLOCK];
    let mut start = lo;
    while start < hi {
        let len = BLOCK.min(hi - start);
        // SAFETY: in bounds and not written concurrently, by the contract above; the
        // slices die before anything is written to this range.
        let input = |k: usize| unsafe {
            std::slice::from_raw_parts((buffers.inputs[k] as *const E).add(start), len)
        };
        let acc = init(&mut acc[..len], input(0), |x: &E| x.widen());
        for k in 1..n {
            match op {
                ReduceOp::Sum | ReduceOp::Avg => fold(acc, input(k), Accumulate::add),
                ReduceOp::Prod => fold(acc, input(k), Accumulate::mul),
                ReduceOp::Min => fold(acc, input(k), Accumulate::min),
                ReduceOp::Max => fold(acc, input(k), Accumulate::max),
            }
        }
        if op == ReduceOp::Avg {
            for a in acc.iter_mut() {
                *a = a.avg(n);
            }
        }
        if streaming {
            let out = init(&mut out[..len], acc, |a: &E::Acc| E::narrow(*a));
            for &output in buffers.outputs {
                // SAFETY: in bounds, and nobody else touches this range of the output; the
                // input slices over the same memory (in place) are dead by now.
                unsafe { stream(out, (output as *mut E).add(start)) };
            }
        } else {
            for &output in buffers.outputs {
                // SAFETY: as for `stream` above.
                let dst: &mut [E] =
                    unsafe { std::slice::from_raw_parts_mut((output as *mut E).add(start), len) };
                for (d, a) in dst.iter_mut().zip(acc.iter()) {
                    *d = E::narrow(*a);
                }
            }
        }
        start += len;
    }
    if streaming {
        finish_streaming();
    }
}

/// Fills `slots` with `f` of each of `from` (as many as there are slots) and returns them.
#[inline(always)]
fn init<'a, T, U>(slots: &'a mut [MaybeUninit<T>], from: &[U], f: impl Fn(&U) -> T) -> &'a mut [T] {
    assert_eq!(slots.len(), from.len());
    for (slot, x) in slots.iter_mut().zip(from) {
        slot.write(f(x));
    }
    // SAFETY: every element was written just above.
    unsafe { &mut *(std::ptr::from_mut(slots) as *mut [T]) }
}

/// Copies `src` to `dst` with streaming stores where the target has them.
///
/// # Safety
/// `dst` is valid for `src.len()` writes and does not overlap `src`.
#[inline(always)]
unsafe fn stream<E>(src: &[E], dst: *mut E) {
    let (src, dst, len) = (
        src.as_ptr().cast::<u8>(),
        dst.cast::<u8>(),
        size_of_val(src),
    );
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        let head = dst.align_offset(16).min(len);
        // SAFETY: within both ranges; the streamed part is 16-byte aligned at `dst`.
        unsafe {
            std::ptr::copy_nonoverlapping(src, dst, head);
            let mut i = head;
            while i + 16 <= len {
                let v = _mm_loadu_si128(src.add(i).cast::<__m128i>());
                _mm_stream_si128(dst.add(i).cast::<__m128i>(), v);
                i += 16;
            }
            std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), len - i);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as the caller promises.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, len)
    };
}

/// Orders streaming stores before what follows (the release that publishes them).
fn finish_streaming() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a store fence has no preconditions.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

/// Runs `$body` with `$E` the element type `$elem` names.
macro_rules! of_element {
    ($elem:expr, $E:ident => $body:expr) => {
        match $elem {
            Elem::I8 => {
                type $E = i8;
                $body
            }
            Elem::U8 => {
                type $E = u8;
                $body
            }
            Elem::I32 => {
                type $E = i32;
                $body
            }
            Elem::U32 => {
                type $E = u32;
                $body
            }
            Elem::I64 => {
                type $E = i64;
                $body
            }
            Elem::U64 => {
                type $E = u64;
                $body
            }
            Elem::F16 => {
                type $E = Half;
                $body
            }
            Elem::Bf16 => {
                type $E = BHalf;
                $body
            }
            Elem::F32 => {
                type $E = f32;
                $body
            }
            Elem::F64 => {
                type $E = f64;
                $body
            }
        }
    };
}

/// Reduces elements `lo..hi` of every input of type `elem` into every output.
///
/// # Safety
/// As for [`reduce_range`], with `E` the type `elem` names.
pub unsafe fn reduce(elem: Elem, op: ReduceOp, buffers: &Buffers<'_>, lo: usize, hi: usize) {
    // SAFETY: forwarded from the caller.
    of_element!(elem, E => unsafe { reduce_range::<E>(op, buffers, lo, hi) })
}

/// Turns the `count` sums of `n` values at `addr` into their means, as `ReduceOp::Avg` does.
///
/// # Safety
/// `addr` holds `count` aligned elements of the type `elem` names, which nobody else touches
/// meanwhile.
pub unsafe fn average(elem: Elem, addr: usize, count: usize, n: usize) {
    of_element!(elem, E => {
        // SAFETY: by the contract.
        let sums = unsafe { std::slice::from_raw_parts_mut(addr as *mut E, count) };
        for sum in sums {
            *sum = E::narrow(sum.widen().avg(n));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_conversions_round_trip_every_value() {
        for h in 0..=u16::MAX {
            let f = f16_to_f32(h);
            if f.is_nan() {
                assert!(f16_to_f32(f32_to_f16(f)).is_nan());
            } else {
                assert_eq!(f32_to_f16(f), h, "half {h:#06x}");
            }
        }
        assert_eq!(f32_to_f16(1.0 + 1.0 / 4096.0), 0x3c00); // ties to even
        assert_eq!(f32_to_f16(70000.0), 0x7c00);
        assert_eq!(f32_to_f16(5.96e-8), 0x0001);
    }

    #[test]
    fn bfloat_conversions_round_trip_every_value() {
        for b in 0..=u16::MAX {
            let f = bf16_to_f32(b);
            if f.is_nan() {
                assert!(bf16_to_f32(f32_to_bf16(f)).is_nan());
            } else {
                assert_eq!(f32_to_bf16(f), b);
            }
        }
    }
}
