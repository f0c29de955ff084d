/*
 * discovm.hpp: the C++17 interface to discovm, on top of the C API in discovm.h.
 *
 * Header-only: include it and link the library as for C (-ldiscovm, pkg-config's `discovm`, or
 * CMake's discovm::discovm). Everything is in namespace `discovm`:
 *
 *   discovm::Function::from([](int64_t x) { return x * (discovm::current_worker_id() + 1); })
 *       .register_global("example.scale");
 *   discovm::Session session(4);                             // four worker threads
 *   discovm::DRef scale = session.get_global_func("example.scale");
 *   discovm::DRef result = session.call(scale, 10);          // runs on every worker
 *   int64_t on_worker_2 = result.get<int64_t>(2);            // 30
 *
 * - Handles (Function, Session, Worker, DRef, Stream, Tensor) own one reference to their
 *   object and release it in their destructor. They move and do not copy; `clone()` takes
 *   another reference. An empty (default-constructed or moved-from) handle converts to false;
 *   calling it throws a ValueError. `raw()` lends the C handle, `release()` hands it over, and
 *   `Tensor t(discovm::adopt, ptr)` takes over one obtained from the C API.
 * - Values: `Value` owns a packed value (a DVMAny), `AnyView` borrows one (a function's
 *   arguments). `as<T>()` converts with tvm-ffi's rules (an int from Int or Bool, a double
 *   from Float, Int or Bool, ...) and throws a TypeError naming both types when it cannot.
 * - Calls take any mix of C++ values: bool, integers, floating point, strings, nullptr (None),
 *   DLDataType, DLDevice, DLTensor pointers, handles, Values and AnyViews.
 * - Failures throw discovm::Error, which carries the error's kind ("ValueError", "KeyError",
 *   "WorkerError", ...), its status code and its message (what()).
 *
 * Handles and values may be used from any thread, as the C API allows.
 */
#ifndef DISCOVM_HPP
#define DISCOVM_HPP

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "discovm.h"

namespace discovm {

// ============================================================================================
// Errors
// ============================================================================================

namespace detail {

/// The status code of an error kind (DVM_OTHER_ERROR for kinds without their own).
inline dvm_status status_of(std::string_view kind) noexcept {
  constexpr std::pair<std::string_view, dvm_status> kinds[] = {
      {"ValueError", DVM_VALUE_ERROR},
      {"TypeError", DVM_TYPE_ERROR},
      {"IndexError", DVM_INDEX_ERROR},
      {"KeyError", DVM_KEY_ERROR},
      {"RuntimeError", DVM_RUNTIME_ERROR},
      {"WorkerError", DVM_WORKER_ERROR},
      {"SessionClosed", DVM_SESSION_CLOSED},
      {"DeviceUnavailable", DVM_DEVICE_UNAVAILABLE},
      {"TimeoutError", DVM_TIMEOUT},
      {"Panic", DVM_PANIC},
  };
  for (const auto& [name, status] : kinds) {
    if (name == kind) return status;
  }
  return DVM_OTHER_ERROR;
}

}  // namespace detail

/// A failed call: the error's kind (kind()), its status code (status()) and its message
/// (what()). Thrown for every failure reported by the library, and for values that do not
/// convert. Throw one from a function made with Function::from to raise that kind to its
/// caller; any other exception reaches the caller as a RuntimeError with its what().
class Error : public std::runtime_error {
 public:
  /// An error of `kind`, with the status code that kind has (DVM_OTHER_ERROR for other kinds).
  Error(const std::string& kind, const std::string& message)
      : Error(detail::status_of(kind), kind, message) {}

  Error(dvm_status status, const std::string& kind, const std::string& message)
      : std::runtime_error(message),
        status_(status),
        kind_(std::make_shared<const std::string>(kind)) {}

  /// The kind, e.g. "ValueError", "KeyError", "WorkerError".
  const std::string& kind() const noexcept { return *kind_; }

  /// The status code the C API returned (DVM_VALUE_ERROR, ...).
  dvm_status status() const noexcept { return status_; }

 private:
  dvm_status status_;
  std::shared_ptr<const std::string> kind_;  // shared: copying an exception must not throw
};

namespace detail {

/// The calling thread's last error, as an exception with `status`.
inline Error last_error(dvm_status status) {
  const char* kind = dvm_last_error_kind();
  const char* message = dvm_last_error_message();
  return Error(status, kind != nullptr ? kind : "RuntimeError",
               message != nullptr ? message : "");
}

/// The calling thread's last error, with the status its kind has (for the few C functions
/// that return -1 or NULL rather than a status).
inline Error last_error() {
  const char* kind = dvm_last_error_kind();
  return last_error(status_of(kind != nullptr ? kind : "RuntimeError"));
}

/// Throws the calling thread's last error unless `status` is DVM_OK.
inline void check(dvm_status status) {
  if (status != DVM_OK) throw last_error(status);
}

}  // namespace detail

// ============================================================================================
// Devices, data types, library facts
// ============================================================================================

/// The host. Tensors and streams default to it.
constexpr DLDevice cpu(int32_t id = 0) noexcept { return DLDevice{kDLCPU, id}; }
/// A CUDA GPU (see device_count(kDLCUDA)).
constexpr DLDevice cuda(int32_t id = 0) noexcept { return DLDevice{kDLCUDA, id}; }

inline constexpr DLDataType int8{kDLInt, 8, 1};
inline constexpr DLDataType int16{kDLInt, 16, 1};
inline constexpr DLDataType int32{kDLInt, 32, 1};
inline constexpr DLDataType int64{kDLInt, 64, 1};
inline constexpr DLDataType uint8{kDLUInt, 8, 1};
inline constexpr DLDataType uint16{kDLUInt, 16, 1};
inline constexpr DLDataType uint32{kDLUInt, 32, 1};
inline constexpr DLDataType uint64{kDLUInt, 64, 1};
inline constexpr DLDataType float16{kDLFloat, 16, 1};
inline constexpr DLDataType bfloat16{kDLBfloat, 16, 1};
inline constexpr DLDataType float32{kDLFloat, 32, 1};
inline constexpr DLDataType float64{kDLFloat, 64, 1};
inline constexpr DLDataType bool8{kDLBool, 8, 1};

/// The data type of tensors whose elements are `T` (fixed-width integers, float, double, bool).
template <typename T>
constexpr DLDataType dtype_of() noexcept {
  if constexpr (std::is_same_v<T, bool>) {
    return bool8;
  } else if constexpr (std::is_integral_v<T>) {
    return DLDataType{static_cast<uint8_t>(std::is_signed_v<T> ? kDLInt : kDLUInt),
                      static_cast<uint8_t>(8 * sizeof(T)), 1};
  } else {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                  "dtype_of<T>: T must be an integer, float, double or bool");
    return DLDataType{kDLFloat, static_cast<uint8_t>(8 * sizeof(T)), 1};
  }
}

/// The library's version, e.g. "0.1.0".
inline std::string version() { return dvm_version(); }

/// How many devices of a type the library can use: 1 for kDLCPU; the GPUs the CUDA driver
/// reports for kDLCUDA (0 without a driver or a GPU).
inline int32_t device_count(DLDeviceType type) {
  int32_t count = 0;
  detail::check(dvm_device_count(type, &count));
  return count;
}

/// The id of the worker running the calling thread, or -1 off worker threads.
inline int32_t current_worker_id() noexcept { return dvm_current_worker_id(); }

// ============================================================================================
// Values
// ============================================================================================

/// Tag for taking over a reference obtained from the C API: `Tensor t(discovm::adopt, ptr)`.
struct adopt_t {
  explicit adopt_t() = default;
};
inline constexpr adopt_t adopt{};

class AnyView;
class Value;
class Function;
class Tensor;

namespace detail {

/// Base of every handle class, to recognise them in templates.
struct HandleTag {};
template <typename T>
inline constexpr bool is_handle_v = std::is_base_of_v<HandleTag, T>;

template <typename T>
T value_as(const DVMAny& value);

/// A packed value for an object (None for NULL), borrowing the caller's reference.
inline DVMAny object_any(const void* object) noexcept {
  DVMAny value{};
  if (object != nullptr) {
    value.type_index = static_cast<const DVMObject*>(object)->type_index;
    value.v_obj = static_cast<DVMObject*>(const_cast<void*>(object));
  }
  return value;
}

}  // namespace detail

/// A borrowed packed value: what a function receives as its arguments. Valid while the value
/// it views is (for arguments: during the call).
class AnyView {
 public:
  /// None.
  AnyView() noexcept : raw_{} {}
  explicit AnyView(const DVMAny& raw) noexcept : raw_(raw) {}

  /// The type index (kDVMInt, kDVMStr, ...; objects of run-time types have 128 and up).
  int32_t type_index() const noexcept { return raw_.type_index; }
  bool is_none() const noexcept { return raw_.type_index == kDVMNone; }

  /// The value as a `T`: bool, an integer type, float or double, std::string (from str or
  /// bytes), DLDataType, DLDevice, const DLTensor* (from a tensor: borrowed), Tensor and
  /// Function (new references), Value (an owned copy), std::vector<T> (from an Array, or from
  /// a Shape for integers) and std::optional<T> (None is nullopt).
  /// Throws TypeError when the value holds another type, ValueError when an integer does not
  /// fit in `T`.
  template <typename T>
  T as() const {
    return detail::value_as<T>(raw_);
  }

  /// The C value, borrowed.
  const DVMAny& raw() const noexcept { return raw_; }

 protected:
  DVMAny raw_;
};

/// An owned packed value (the result of a call, a register's contents): releases what it
/// holds when it goes. Moves and does not copy; `clone()` makes an owned copy.
class Value : public AnyView {
 public:
  /// None.
  Value() noexcept = default;
  Value(std::nullptr_t) noexcept {}
  /// Takes over an owned value from the C API (a result, or what dvm_dref_get wrote).
  Value(adopt_t, const DVMAny& owned) noexcept : AnyView(owned) {}

  /// A Bool, Int or Float.
  template <typename T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  Value(T x) noexcept {
    if constexpr (std::is_same_v<T, bool>) {
      raw_.type_index = kDVMBool;
      raw_.v_int64 = x ? 1 : 0;
    } else if constexpr (std::is_integral_v<T>) {
      raw_.type_index = kDVMInt;
      raw_.v_int64 = static_cast<int64_t>(x);
    } else {
      raw_.type_index = kDVMFloat;
      raw_.v_float64 = static_cast<double>(x);
    }
  }

  /// A string (copied; None for a NULL pointer).
  Value(const char* s) : Value(s != nullptr ? string(s) : Value()) {}
  Value(std::string_view s) : Value(string(s)) {}
  Value(const std::string& s) : Value(string(s)) {}

  Value(DLDataType dtype) noexcept {
    raw_.type_index = kDVMDataType;
    raw_.v_dtype = dtype;
  }

  Value(DLDevice device) noexcept {
    raw_.type_index = kDVMDevice;
    raw_.v_device = device;
  }

  /// An object: takes another reference from an lvalue handle, the handle's own from an
  /// rvalue one. An empty handle gives None.
  template <typename H, std::enable_if_t<detail::is_handle_v<std::decay_t<H>>, int> = 0>
  Value(H&& handle) {
    if constexpr (std::is_lvalue_reference_v<H>) {
      raw_ = detail::object_any(handle.clone().release());
    } else {
      raw_ = detail::object_any(handle.release());
    }
  }

  /// An owned copy of a borrowed value (objects gain a reference; a borrowed C string or byte
  /// array is copied). A borrowed DLTensor* cannot be kept: TypeError.
  Value(const AnyView& view) : AnyView(view.as<Value>().release()) {}

  /// A string value: inline up to 7 bytes, a String object beyond.
  static Value string(std::string_view s) {
    DVMAny out{};
    detail::check(dvm_string_new(s.data(), s.size(), &out));
    return Value(adopt, out);
  }

  /// A byte-string value: inline up to 7 bytes, a Bytes object beyond.
  static Value bytes(std::string_view b) {
    DVMAny out{};
    detail::check(dvm_bytes_new(b.data(), b.size(), &out));
    return Value(adopt, out);
  }

  /// A Shape object, e.g. for runtime.disco.empty.
  static Value shape(const std::vector<int64_t>& dims) {
    DVMAny out{};
    detail::check(dvm_shape_new(dims.data(), static_cast<int32_t>(dims.size()), &out));
    return Value(adopt, out);
  }

  Value(const Value&) = delete;
  Value& operator=(const Value&) = delete;
  Value(Value&& other) noexcept : AnyView(other.release()) {}
  Value& operator=(Value&& other) noexcept {
    if (this != &other) {
      reset();
      raw_ = other.release();
    }
    return *this;
  }
  ~Value() { reset(); }

  /// An owned copy: objects gain a reference.
  Value clone() const { return as<Value>(); }

  /// Hands the value over (the caller releases it with dvm_any_release); leaves None.
  DVMAny release() noexcept { return std::exchange(raw_, DVMAny{}); }

 private:
  void reset() noexcept { dvm_any_release(&raw_); }
};

/// The arguments of a call, borrowed for its duration.
class Args {
 public:
  Args(const DVMAny* values, int32_t count) noexcept : values_(values), count_(count) {}

  int32_t size() const noexcept { return count_; }
  /// Argument `i` (unchecked).
  AnyView operator[](int32_t i) const noexcept { return AnyView(values_[i]); }
  /// Argument `i`; IndexError if there are not that many.
  AnyView at(int32_t i) const {
    if (i < 0 || i >= count_) {
      throw Error("IndexError", "argument " + std::to_string(i) + " out of range (" +
                                    std::to_string(count_) + " arguments)");
    }
    return (*this)[i];
  }

 private:
  const DVMAny* values_;
  int32_t count_;
};

// ============================================================================================
// Handles
// ============================================================================================

namespace detail {

/// A move-only owner of one reference to a C handle `T`, released with `Free`.
template <typename Derived, typename T, void (*Free)(T*)>
class Handle : public HandleTag {
 public:
  /// An empty handle.
  Handle() noexcept = default;
  /// Takes over one reference obtained from the C API.
  Handle(adopt_t, T* owned) noexcept : ptr_(owned) {}

  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& other) noexcept : ptr_(std::exchange(other.ptr_, nullptr)) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      Free(ptr_);
      ptr_ = std::exchange(other.ptr_, nullptr);
    }
    return *this;
  }
  ~Handle() { Free(ptr_); }

  /// The C handle, still owned by this object (NULL when empty).
  T* raw() const noexcept { return ptr_; }
  /// Hands the reference over (free it with the C API's `_free`); leaves this handle empty.
  T* release() noexcept { return std::exchange(ptr_, nullptr); }
  /// Whether the handle holds an object.
  explicit operator bool() const noexcept { return ptr_ != nullptr; }

  /// Another handle to the same object (an empty one for an empty handle).
  Derived clone() const {
    if (ptr_ != nullptr) check(dvm_object_inc_ref(ptr_));
    return Derived(adopt, ptr_);
  }

 private:
  T* ptr_ = nullptr;
};

/// Borrowed packed arguments built from C++ values for one call. Strings given as
/// std::string or std::string_view are copied into values held here; everything else is
/// borrowed from the caller.
template <std::size_t N>
class Packed {
 public:
  template <typename... A>
  explicit Packed(const A&... args) {
    [[maybe_unused]] std::size_t i = 0;
    (put(i++, args), ...);
  }

  const DVMAny* data() const noexcept { return N == 0 ? nullptr : raw_.data(); }
  static constexpr int32_t size() noexcept { return static_cast<int32_t>(N); }

 private:
  template <typename T>
  void put(std::size_t i, const T& x) {
    if constexpr (is_handle_v<T>) {
      raw_[i] = object_any(x.raw());
    } else if constexpr (std::is_base_of_v<AnyView, T>) {
      raw_[i] = x.raw();
    } else if constexpr (std::is_same_v<T, std::nullptr_t>) {
      raw_[i] = DVMAny{};
    } else if constexpr (std::is_convertible_v<const T&, const char*>) {
      const char* s = x;
      if (s != nullptr) {
        raw_[i].type_index = kDVMRawStr;
        raw_[i].v_c_str = s;
      }
    } else if constexpr (std::is_same_v<T, DLTensor> ||
                         std::is_convertible_v<const T&, const DLTensor*>) {
      const DLTensor* tensor;
      if constexpr (std::is_same_v<T, DLTensor>) {
        tensor = &x;
      } else {
        tensor = x;
      }
      if (tensor != nullptr) {
        raw_[i].type_index = kDVMDLTensorPtr;
        raw_[i].v_ptr = const_cast<DLTensor*>(tensor);
      }
    } else {
      owned_[i] = Value(x);
      raw_[i] = owned_[i].raw();
    }
  }

  std::array<DVMAny, N> raw_{};
  std::array<Value, N> owned_;
};

template <typename... A>
Packed(const A&...) -> Packed<sizeof...(A)>;

}  // namespace detail

/// A packed function: made from a C++ callable, looked up by name, or returned by a call.
class Function : public detail::Handle<Function, dvm_func, dvm_func_free> {
 public:
  using Handle::Handle;

  /// Makes a function from a C++ callable, which may then run on any thread, several at once
  /// (session workers): it must be safe to call concurrently. Two forms:
  /// - typed: `[](int64_t a, double b, std::string name, Tensor t) { ... }`: the caller's
  ///   arguments are converted with AnyView::as (a wrong count or type is a TypeError that
  ///   names the argument), and the result becomes a Value (void gives None);
  /// - packed: `[](discovm::Args args) { ... }`: the arguments as they came.
  /// A discovm::Error thrown by the callable reaches the caller with its kind and message;
  /// any other exception as a RuntimeError with its what().
  template <typename F>
  static Function from(F&& callable);

  /// The global function registered under `name`; KeyError if there is none.
  static Function get_global(const std::string& name) {
    dvm_func* out = nullptr;
    detail::check(dvm_func_get_global(name.c_str(), &out));
    return Function(adopt, out);
  }

  /// Removes a global function; KeyError if there is none.
  static void remove_global(const std::string& name) {
    detail::check(dvm_func_remove_global(name.c_str()));
  }

  /// The names of all global functions, sorted.
  static std::vector<std::string> global_names();

  /// Registers this function under `name` in the process-wide registry, which keeps its own
  /// reference. ValueError if the name is taken and `allow_override` is false.
  void register_global(const std::string& name, bool allow_override = false) const {
    detail::check(dvm_func_register_global(name.c_str(), raw(), allow_override ? 1 : 0));
  }

  /// Calls the function; returns its result.
  template <typename... A>
  Value operator()(const A&... args) const {
    const detail::Packed packed{args...};
    DVMAny result{};
    detail::check(dvm_func_call(raw(), packed.data(), packed.size(), &result));
    return Value(adopt, result);
  }
};

/// A remote reference: names one register on every worker of a session, holding a function
/// (from get_global_func) or the results of a call. Passed as an argument to a session call,
/// it becomes each worker's own value of that register. When the last reference goes, the
/// register is freed on every worker, after the calls sent before.
class DRef : public detail::Handle<DRef, dvm_dref, dvm_dref_free> {
 public:
  using Handle::Handle;

  /// The value the register holds on `worker`, after every call sent before. WorkerError if
  /// the call that should have filled it failed, with that failure's message.
  Value get(int32_t worker) const {
    DVMAny out{};
    detail::check(dvm_dref_get(raw(), worker, &out));
    return Value(adopt, out);
  }

  /// get(worker).as<T>().
  template <typename T>
  T get(int32_t worker) const {
    return get(worker).as<T>();
  }

  /// Sets the register on `worker` to a copy of `value`, after every call sent before.
  template <typename T>
  void set(int32_t worker, const T& value) const {
    const detail::Packed packed{value};
    detail::check(dvm_dref_set(raw(), worker, packed.data()));
  }
};

/// One worker of a session.
class Worker : public detail::Handle<Worker, dvm_worker, dvm_worker_free> {
 public:
  using Handle::Handle;

  /// The worker running the calling thread, for functions that run on workers; RuntimeError
  /// off worker threads.
  static Worker current() {
    dvm_worker* borrowed = nullptr;
    detail::check(dvm_current_worker(&borrowed));
    detail::check(dvm_object_inc_ref(borrowed));
    return Worker(adopt, borrowed);
  }

  /// The worker's id, from 0.
  int32_t id() const {
    const int32_t id = dvm_worker_id(raw());
    if (id < 0) throw detail::last_error();
    return id;
  }

  /// The worker's device.
  DLDevice device() const {
    DLDevice out{};
    detail::check(dvm_worker_device(raw(), &out));
    return out;
  }

  /// Calls the function in `func` on this worker only; returns at once. The result DRef
  /// holds a value on this worker alone.
  template <typename... A>
  DRef call(const DRef& func, const A&... args) const {
    const detail::Packed packed{args...};
    dvm_dref* out = nullptr;
    detail::check(dvm_worker_call(raw(), func.raw(), packed.data(), packed.size(), &out));
    return DRef(adopt, out);
  }

  /// Waits until every call sent so far to this worker has finished; WorkerError if one
  /// failed since the last wait.
  void sync() const { detail::check(dvm_worker_sync(raw())); }
};

/// Options of a threaded session; the defaults suit most programs.
struct SessionOptions {
  /// Upper bound of every wait (sync, copy, register read, shutdown); 0: no bound. A wait
  /// that runs past it throws a TimeoutError.
  std::chrono::milliseconds timeout{0};
  /// How long waiting threads spin, then yield, before they park, in microseconds; 0: the
  /// default; negative: park at once.
  int32_t spin_us = 0;
  /// The CPU each worker is pinned to (-1: not pinned); empty: no pinning.
  std::vector<int32_t> cpu_affinity;
  /// The device of each worker (cpu() or a cuda(i)); empty: every worker on the CPU.
  std::vector<DLDevice> devices;
};

/// A threaded session: worker threads driven by this controller, in the style of TVM's Disco.
/// Calls are broadcast to every worker and run on each worker's thread, in the order sent;
/// failures on the workers are reported by the next wait (a sync, a copy, a register read).
class Session : public detail::Handle<Session, dvm_session, dvm_session_free> {
 public:
  using Handle::Handle;
  /// An empty handle.
  Session() noexcept = default;

  /// Starts `num_workers` worker threads in `num_groups` groups of equal size.
  explicit Session(int32_t num_workers, int32_t num_groups = 1,
                   const SessionOptions& options = {})
      : Handle(adopt, start(num_workers, num_groups, options)) {}

  int32_t num_workers() const {
    const int32_t n = dvm_session_num_workers(raw());
    if (n < 0) throw detail::last_error();
    return n;
  }

  /// A DRef to the global function `name` on every worker; KeyError if there is none.
  DRef get_global_func(const std::string& name) const {
    dvm_dref* out = nullptr;
    detail::check(dvm_session_get_global_func(raw(), name.c_str(), &out));
    return DRef(adopt, out);
  }

  /// Loads the shared library at `path` on every worker (it exports packed functions as
  /// `__tvm_ffi_<name>`) and returns at once with a DRef to the module; ValueError if `path`
  /// is not a file, and a library a worker cannot load fails its next wait.
  DRef load_module(const std::string& path) const {
    dvm_dref* out = nullptr;
    detail::check(dvm_session_load_module(raw(), path.c_str(), &out));
    return DRef(adopt, out);
  }

  /// A DRef to the function `name` of the module in `module` on every worker, ready for
  /// `call`; a missing function fails each worker's next wait with a KeyError naming it.
  DRef module_func(const DRef& module, const std::string& name) const {
    dvm_dref* out = nullptr;
    detail::check(dvm_session_module_func(raw(), module.raw(), name.c_str(), &out));
    return DRef(adopt, out);
  }

  /// Broadcasts a call of the function in `func` to every worker and returns at once, with a
  /// DRef to the results. Arguments are copied once for all workers; a DRef argument becomes
  /// each worker's own value of that register.
  template <typename... A>
  DRef call(const DRef& func, const A&... args) const {
    const detail::Packed packed{args...};
    dvm_dref* out = nullptr;
    detail::check(dvm_session_call(raw(), func.raw(), packed.data(), packed.size(), &out));
    return DRef(adopt, out);
  }

  /// Waits for every call sent so far to `worker`; WorkerError naming the worker, the
  /// function and the cause if one failed since the last wait.
  void sync_worker(int32_t worker) const {
    detail::check(dvm_session_sync_worker(raw(), worker));
  }

  /// Waits for every call sent so far to every worker (the first failure is reported).
  void sync_all() const { detail::check(dvm_session_sync_all(raw())); }

  /// Sets up collectives between the workers (Disco's runtime.disco.allreduce, allgather, ...):
  /// `backend` "cpu" (shared memory), with no device ids or one per worker.
  void init_ccl(const std::string& backend = "cpu",
                const std::vector<int32_t>& device_ids = {}) const {
    detail::check(dvm_session_init_ccl(raw(), backend.c_str(), device_ids.data(),
                                       static_cast<int32_t>(device_ids.size())));
  }

  /// Copies a compact host tensor into the tensor `dst` holds on worker 0; returns when done.
  void copy_to_worker0(const DLTensor& host, const DRef& dst) const {
    detail::check(dvm_session_copy_to_worker0(raw(), &host, dst.raw()));
  }

  /// Copies the tensor `src` holds on worker 0 into the memory `host` describes (a compact
  /// host tensor of the same shape and dtype); returns with it filled.
  void copy_from_worker0(const DLTensor& host, const DRef& src) const {
    DLTensor destination = host;
    detail::check(dvm_session_copy_from_worker0(raw(), &destination, src.raw()));
  }

  /// How many registers hold a value on `worker`, after the calls sent before: 0 once every
  /// DRef is gone (a leak check).
  int64_t live_registers(int32_t worker) const {
    int64_t out = 0;
    detail::check(dvm_session_live_registers(raw(), worker, &out));
    return out;
  }

  /// A handle to worker `worker` (it keeps the session alive); IndexError out of range.
  Worker worker(int32_t worker) const {
    dvm_worker* out = nullptr;
    detail::check(dvm_session_worker(raw(), worker, &out));
    return Worker(adopt, out);
  }

  /// Stops the workers once the work already sent has run, and joins them. Every later call
  /// on the session, its DRefs and its workers throws SessionClosed. The destructor of the
  /// last handle does this too, without reporting errors.
  void shutdown() const { detail::check(dvm_session_shutdown(raw())); }

 private:
  static dvm_session* start(int32_t num_workers, int32_t num_groups,
                            const SessionOptions& options) {
    dvm_session_options c_options{};
    c_options.timeout_ms = static_cast<int64_t>(options.timeout.count());
    c_options.spin_us = options.spin_us;
    c_options.num_cpu_affinity = static_cast<int32_t>(options.cpu_affinity.size());
    c_options.cpu_affinity = options.cpu_affinity.data();
    c_options.num_devices = static_cast<int32_t>(options.devices.size());
    c_options.devices = options.devices.data();
    dvm_session* out = nullptr;
    detail::check(dvm_session_new_threaded(num_workers, num_groups, &c_options, &out));
    return out;
  }
};

/// A tensor: a Tensor object holding a DLTensor, on the host or a GPU. Its uses on streams
/// are ordered: reads and writes through read(), write() and Stream::copy() see the effect of
/// every earlier use.
class Tensor : public detail::Handle<Tensor, dvm_tensor, dvm_tensor_free> {
 public:
  using Handle::Handle;

  /// A compact tensor: zero-filled and 64-byte aligned on the host, uninitialised on a GPU.
  static Tensor empty(const std::vector<int64_t>& shape, DLDataType dtype,
                      DLDevice device = cpu()) {
    dvm_tensor* out = nullptr;
    detail::check(dvm_tensor_empty(shape.data(), static_cast<int32_t>(shape.size()), dtype,
                                   device, &out));
    return Tensor(adopt, out);
  }

  /// Wraps a DLPack tensor without copying; the tensor calls its deleter when the last
  /// reference goes. If this throws, the caller still owns `managed`.
  static Tensor from_dlpack(DLManagedTensorVersioned* managed) {
    dvm_tensor* out = nullptr;
    detail::check(dvm_tensor_from_dlpack(managed, &out));
    return Tensor(adopt, out);
  }

  /// Exports the tensor through DLPack without copying. The consumer owns the result and
  /// calls `result->deleter(result)` once when done; the tensor lives until then.
  DLManagedTensorVersioned* to_dlpack() const {
    DLManagedTensorVersioned* out = nullptr;
    detail::check(dvm_tensor_to_dlpack(raw(), &out));
    return out;
  }

  /// The DLTensor, valid while the tensor lives.
  const DLTensor& dl() const {
    const DLTensor* tensor = dvm_tensor_dl(raw());
    if (tensor == nullptr) {
      throw Error("ValueError", raw() == nullptr ? "the tensor handle is empty"
                                                 : "the handle is not a tensor");
    }
    return *tensor;
  }

  std::vector<int64_t> shape() const {
    const DLTensor& t = dl();
    return std::vector<int64_t>(t.shape, t.shape + t.ndim);
  }
  DLDataType dtype() const { return dl().dtype; }
  DLDevice device() const { return dl().device; }

  /// The number of elements.
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t dim : shape()) n *= dim;
    return n;
  }

  /// The size of the data, in bytes (sub-byte elements packed).
  std::size_t nbytes() const {
    const DLDataType t = dtype();
    const auto bits = static_cast<std::size_t>(numel()) * t.bits * t.lanes;
    return (bits + 7) / 8;
  }

  /// Copies the first `nbytes` bytes into `dst`, after every earlier use of the tensor on any
  /// stream. Meant for small reads (a scalar, a flag) and host access.
  void read(void* dst, std::size_t nbytes) const {
    detail::check(dvm_tensor_read(raw(), dst, nbytes));
  }

  /// Copies `nbytes` bytes from `src` into the start of the tensor, after every earlier use.
  void write(const void* src, std::size_t nbytes) const {
    detail::check(dvm_tensor_write(raw(), src, nbytes));
  }

  /// The first element; TypeError unless the tensor's dtype is dtype_of<T>().
  template <typename T>
  T item() const {
    check_element<T>();
    T value{};
    read(&value, sizeof(T));
    return value;
  }

  /// Every element (row-major), read after every earlier use of the tensor.
  template <typename T>
  std::vector<T> to_vector() const {
    static_assert(!std::is_same_v<T, bool>, "read bool tensors as uint8_t");
    check_element<T>();
    std::vector<T> values(static_cast<std::size_t>(numel()));
    read(values.data(), values.size() * sizeof(T));
    return values;
  }

  /// Writes `values` into the first elements; TypeError unless the dtype is dtype_of<T>().
  template <typename T>
  void write(const std::vector<T>& values) const {
    static_assert(!std::is_same_v<T, bool>, "write bool tensors from uint8_t");
    check_element<T>();
    write(values.data(), values.size() * sizeof(T));
  }

 private:
  template <typename T>
  void check_element() const;
};

/// A stream: runs copies in order on one device. Work on different streams is ordered only
/// through the tensors it uses, and through wait_for().
class Stream : public detail::Handle<Stream, dvm_stream, dvm_stream_free> {
 public:
  using Handle::Handle;
  /// An empty handle.
  Stream() noexcept = default;

  /// A stream on `device` (a non-blocking CUDA stream on a GPU).
  explicit Stream(DLDevice device) : Handle(adopt, create(device)) {}

  /// Queues a copy of `src` into `dst` and returns at once. It runs after the work queued
  /// here before it and after every earlier use of either tensor on other streams. Failures
  /// while it runs are reported by the next sync().
  void copy(const Tensor& dst, const Tensor& src) const {
    detail::check(dvm_tensor_copy(dst.raw(), src.raw(), raw()));
  }

  /// Makes work queued here from now on wait for what `signaler` has queued so far, without
  /// blocking the calling thread.
  void wait_for(const Stream& signaler) const {
    detail::check(dvm_stream_wait(raw(), signaler.raw()));
  }

  /// Waits until everything queued so far has run; throws the first failure since the last
  /// sync.
  void sync() const { detail::check(dvm_stream_sync(raw())); }

 private:
  static dvm_stream* create(DLDevice device) {
    dvm_stream* out = nullptr;
    detail::check(dvm_stream_new(device, &out));
    return out;
  }
};

// ============================================================================================
// Implementation
// ============================================================================================

namespace detail {

template <typename T>
struct is_vector : std::false_type {};
template <typename T>
struct is_vector<std::vector<T>> : std::true_type {};

template <typename T>
struct is_optional : std::false_type {};
template <typename T>
struct is_optional<std::optional<T>> : std::true_type {};

template <typename T>
inline constexpr bool always_false_v = false;

/// A readable name for a type index, as the library's own messages print it.
inline std::string type_name(int32_t type_index) {
  switch (type_index) {
    case kDVMNone: return "None";
    case kDVMInt: return "int";
    case kDVMBool: return "bool";
    case kDVMFloat: return "float";
    case kDVMOpaquePtr: return "void*";
    case kDVMDataType: return "DataType";
    case kDVMDevice: return "Device";
    case kDVMDLTensorPtr: return "DLTensor*";
    case kDVMRawStr: return "const char*";
    case kDVMByteArrayPtr: return "ByteArray*";
    case kDVMObjectRValueRef: return "ObjectRValueRef";
    case kDVMSmallStr: return "ffi.SmallStr";
    case kDVMSmallBytes: return "ffi.SmallBytes";
    case kDVMStr: return "ffi.String";
    case kDVMBytes: return "ffi.Bytes";
    case kDVMError: return "ffi.Error";
    case kDVMFunction: return "ffi.Function";
    case kDVMShape: return "ffi.Shape";
    case kDVMTensor: return "ffi.Tensor";
    case kDVMArray: return "ffi.Array";
    default: return "object type " + std::to_string(type_index);
  }
}

/// A readable name for a data type: "float32", "int8", "bfloat16", "float32x4", ...
inline std::string dtype_name(DLDataType dtype) {
  std::string name;
  switch (dtype.code) {
    case kDLInt: name = "int"; break;
    case kDLUInt: name = "uint"; break;
    case kDLFloat: name = "float"; break;
    case kDLBfloat: name = "bfloat"; break;
    case kDLComplex: name = "complex"; break;
    case kDLBool: name = "bool"; break;
    default: name = "type" + std::to_string(dtype.code) + "_"; break;
  }
  name += std::to_string(dtype.bits);
  if (dtype.lanes != 1) name += "x" + std::to_string(dtype.lanes);
  return name;
}

inline Error mismatch(const char* expected, const DVMAny& value) {
  return Error("TypeError",
               std::string("expected ") + expected + " but got " + type_name(value.type_index));
}

/// The cell of an object: the data right after its header.
template <typename Cell>
const Cell& cell_of(const DVMAny& value) {
  return *reinterpret_cast<const Cell*>(value.v_obj + 1);
}

/// The bytes of a string or byte-string value, in any of its forms.
inline std::string_view string_bytes(const DVMAny& value) {
  switch (value.type_index) {
    case kDVMSmallStr:
    case kDVMSmallBytes:
      return std::string_view(value.v_bytes, value.small_str_len);
    case kDVMStr:
    case kDVMBytes: {
      const DVMByteArray& bytes = cell_of<DVMByteArray>(value);
      return std::string_view(bytes.data, bytes.size);
    }
    case kDVMRawStr:
      return std::string_view(value.v_c_str);
    case kDVMByteArrayPtr: {
      const auto* bytes = static_cast<const DVMByteArray*>(value.v_ptr);
      return std::string_view(bytes->data, bytes->size);
    }
    default:
      throw mismatch("str", value);
  }
}

template <typename T>
T value_as(const DVMAny& value) {
  const int32_t index = value.type_index;
  if constexpr (std::is_same_v<T, bool>) {
    if (index != kDVMBool && index != kDVMInt) throw mismatch("bool", value);
    return value.v_int64 != 0;
  } else if constexpr (std::is_integral_v<T>) {
    if (index != kDVMInt && index != kDVMBool) throw mismatch("int", value);
    const int64_t x = value.v_int64;
    const bool fits = std::is_signed_v<T>
                          ? x >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                                x <= static_cast<int64_t>(std::numeric_limits<T>::max())
                          : x >= 0 && static_cast<uint64_t>(x) <= std::numeric_limits<T>::max();
    if (!fits) {
      throw Error("ValueError", std::to_string(x) + " does not fit in a " +
                                    std::to_string(8 * sizeof(T)) + "-bit " +
                                    (std::is_signed_v<T> ? "signed" : "unsigned") + " integer");
    }
    return static_cast<T>(x);
  } else if constexpr (std::is_floating_point_v<T>) {
    if (index == kDVMFloat) return static_cast<T>(value.v_float64);
    if (index == kDVMInt || index == kDVMBool) return static_cast<T>(value.v_int64);
    throw mismatch("float", value);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return std::string(string_bytes(value));
  } else if constexpr (std::is_same_v<T, DLDataType>) {
    if (index != kDVMDataType) throw mismatch("DataType", value);
    return value.v_dtype;
  } else if constexpr (std::is_same_v<T, DLDevice>) {
    if (index != kDVMDevice) throw mismatch("Device", value);
    return value.v_device;
  } else if constexpr (std::is_same_v<T, const DLTensor*>) {
    if (index == kDVMDLTensorPtr) return static_cast<const DLTensor*>(value.v_ptr);
    if (index == kDVMTensor) return &cell_of<DLTensor>(value);
    throw mismatch("DLTensor*", value);
  } else if constexpr (std::is_same_v<T, Tensor> || std::is_same_v<T, Function>) {
    constexpr int32_t expected = std::is_same_v<T, Tensor> ? kDVMTensor : kDVMFunction;
    if (index != expected || value.v_obj == nullptr) {
      throw mismatch(std::is_same_v<T, Tensor> ? "ffi.Tensor" : "ffi.Function", value);
    }
    check(dvm_object_inc_ref(value.v_obj));
    using C = std::remove_pointer_t<decltype(std::declval<T>().raw())>;
    return T(adopt, reinterpret_cast<C*>(value.v_obj));
  } else if constexpr (std::is_same_v<T, AnyView>) {
    return AnyView(value);
  } else if constexpr (std::is_same_v<T, Value>) {
    if (index >= kDVMStaticObjectBegin) {
      if (value.v_obj == nullptr) throw Error("ValueError", "an object value holds NULL");
      check(dvm_object_inc_ref(value.v_obj));
      return Value(adopt, value);
    }
    switch (index) {
      case kDVMRawStr: return Value::string(string_bytes(value));
      case kDVMByteArrayPtr: return Value::bytes(string_bytes(value));
      case kDVMDLTensorPtr:
        throw Error("TypeError", "a borrowed DLTensor* cannot be kept; pass a Tensor object");
      case kDVMObjectRValueRef:
        throw Error("TypeError", "an ObjectRValueRef cannot be copied");
      default: return Value(adopt, value);
    }
  } else if constexpr (is_optional<T>::value) {
    if (index == kDVMNone) return T();
    return T(value_as<typename T::value_type>(value));
  } else if constexpr (is_vector<T>::value) {
    using E = typename T::value_type;
    T out;
    if (index == kDVMArray) {
      const DVMSeqCell& seq = cell_of<DVMSeqCell>(value);
      const auto* items = static_cast<const DVMAny*>(seq.data);
      for (int64_t i = 0; i < seq.size; i++) out.push_back(value_as<E>(items[i]));
      return out;
    }
    if constexpr (std::is_integral_v<E>) {
      if (index == kDVMShape) {
        const DVMShapeCell& dims = cell_of<DVMShapeCell>(value);
        for (std::size_t i = 0; i < dims.size; i++) {
          out.push_back(value_as<E>(Value(dims.data[i]).raw()));
        }
        return out;
      }
    }
    throw mismatch("ffi.Array", value);
  } else {
    static_assert(always_false_v<T>, "discovm: no conversion from a packed value to this type");
  }
}

/// Argument `i` as a `T`, for typed functions; a failure names the argument.
template <typename T>
T argument_as(const Args& args, int32_t i) {
  try {
    return args[i].as<T>();
  } catch (const Error& e) {
    throw Error(e.status(), e.kind(), "argument " + std::to_string(i) + ": " + e.what());
  }
}

/// What a typed callable takes and returns.
template <typename R, typename... A>
struct Signature {};

template <typename F>
struct SignatureOf : SignatureOf<decltype(&F::operator())> {};
template <typename R, typename... A>
struct SignatureOf<R (*)(A...)> {
  using type = Signature<R, A...>;
};
template <typename R, typename... A>
struct SignatureOf<R (*)(A...) noexcept> : SignatureOf<R (*)(A...)> {};
template <typename R, typename C, typename... A>
struct SignatureOf<R (C::*)(A...)> : SignatureOf<R (*)(A...)> {};
template <typename R, typename C, typename... A>
struct SignatureOf<R (C::*)(A...) const> : SignatureOf<R (*)(A...)> {};
template <typename R, typename C, typename... A>
struct SignatureOf<R (C::*)(A...) noexcept> : SignatureOf<R (*)(A...)> {};
template <typename R, typename C, typename... A>
struct SignatureOf<R (C::*)(A...) const noexcept> : SignatureOf<R (*)(A...)> {};

template <typename F, typename R, typename... A, std::size_t... I>
Value invoke_typed(F& f, const Args& args, Signature<R, A...>, std::index_sequence<I...>) {
  if (args.size() != static_cast<int32_t>(sizeof...(A))) {
    throw Error("TypeError", "expected " + std::to_string(sizeof...(A)) + " arguments but got " +
                                 std::to_string(args.size()));
  }
  if constexpr (std::is_void_v<R>) {
    f(argument_as<std::decay_t<A>>(args, static_cast<int32_t>(I))...);
    return Value();
  } else {
    return Value(f(argument_as<std::decay_t<A>>(args, static_cast<int32_t>(I))...));
  }
}

template <typename F, typename R, typename... A>
Value invoke_typed(F& f, const Args& args, Signature<R, A...> signature) {
  return invoke_typed(f, args, signature, std::index_sequence_for<A...>{});
}

/// Runs a callable made into a Function, in the packed calling convention.
template <typename F>
struct Callback {
  static int32_t call(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) noexcept {
    try {
      F& f = *static_cast<F*>(self);
      const Args view(args, num_args);
      Value value;
      if constexpr (std::is_invocable_v<F&, const Args&>) {
        if constexpr (std::is_void_v<std::invoke_result_t<F&, const Args&>>) {
          f(view);
        } else {
          value = Value(f(view));
        }
      } else {
        value = invoke_typed(f, view, typename SignatureOf<F>::type{});
      }
      *result = value.release();
      return 0;
    } catch (const Error& e) {
      dvm_error_raise(e.kind().c_str(), e.what());
    } catch (const std::exception& e) {
      dvm_error_raise("RuntimeError", e.what());
    } catch (...) {
      dvm_error_raise("RuntimeError",
                      "a C++ function threw something not derived from std::exception");
    }
    return -1;
  }

  static void destroy(void* self) noexcept { delete static_cast<F*>(self); }
};

}  // namespace detail

template <typename F>
Function Function::from(F&& callable) {
  using Callable = std::decay_t<F>;
  auto owned = std::make_unique<Callable>(std::forward<F>(callable));
  dvm_func* out = nullptr;
  detail::check(dvm_func_new(owned.get(), &detail::Callback<Callable>::call,
                             &detail::Callback<Callable>::destroy, &out));
  owned.release();  // the function object deletes it now
  return Function(adopt, out);
}

inline std::vector<std::string> Function::global_names() {
  DVMAny out{};
  detail::check(dvm_func_list_global_names(&out));
  return Value(adopt, out).as<std::vector<std::string>>();
}

template <typename T>
void Tensor::check_element() const {
  const DLDataType have = dtype();
  const DLDataType want = dtype_of<T>();
  if (have.code != want.code || have.bits != want.bits || have.lanes != want.lanes) {
    throw Error("TypeError", "the tensor holds " + detail::dtype_name(have) + ", not " +
                                 detail::dtype_name(want));
  }
}

}  // namespace discovm

#endif  // DISCOVM_HPP
