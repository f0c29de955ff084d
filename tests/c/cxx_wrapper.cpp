/*
 * The C++ interface (include/discovm.hpp) as a C++ program sees it: values come back converted,
 * failures arrive as discovm::Error with their kind, status and message, handles move and
 * release what they own, and nothing leaks (every callable destroyed, every worker's register
 * file empty once its DRefs are gone). Compiled with -std=c++17 -Wall -Wextra -Werror
 * -pedantic by tests/c_programs.rs.
 */
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "discovm.hpp"

#include "check.h"

namespace {

/// `body` must throw a discovm::Error with `status`, its kind, and a message containing
/// `text`.
template <typename F>
void expect_throws(dvm_status status, const std::string& text, F&& body, const char* what,
                   int line) {
  const char* kind = check_or_null(check_kind_of(status));
  check_count++;
  try {
    body();
    check_fail(__FILE__, line, (std::string(what) + " did not throw").c_str());
  } catch (const discovm::Error& e) {
    if (e.status() != status || e.kind() != kind ||
        std::string(e.what()).find(text) == std::string::npos) {
      std::fprintf(stderr,
                   "%s:%d: FAILED: %s threw %s (status %d): \"%s\"; expected %s (status %d) "
                   "with \"%s\"\n",
                   __FILE__, line, what, e.kind().c_str(), static_cast<int>(e.status()),
                   e.what(), kind, static_cast<int>(status), text.c_str());
      check_failures++;
    }
  }
}
#define EXPECT_THROWS(status, text, statement) \
  expect_throws((status), (text), [&] { statement; }, #statement, __LINE__)

/// The strong reference count of the object a value or handle holds (the low 32 bits of
/// the header's count, as discovm_abi.h documents).
uint32_t strong_count(const void* object) {
  return static_cast<uint32_t>(static_cast<const DVMObject*>(object)->combined_ref_count);
}

/// Counts live instances, to see that the library destroys a callable exactly when the last
/// reference to its function goes.
std::atomic<int> live_callables{0};
struct Tracked {
  Tracked() { live_callables++; }
  Tracked(const Tracked&) { live_callables++; }
  Tracked(Tracked&&) noexcept { live_callables++; }
  Tracked& operator=(const Tracked&) = delete;
  ~Tracked() { live_callables--; }
};

void values() {
  const discovm::Value answer = 42;
  CHECK(answer.type_index() == kDVMInt);
  CHECK(answer.as<int64_t>() == 42);
  CHECK(answer.as<double>() == 42.0);
  CHECK(answer.as<uint8_t>() == 42);
  EXPECT_THROWS(DVM_VALUE_ERROR, "300 does not fit in a 8-bit signed integer",
               discovm::Value(300).as<int8_t>());
  EXPECT_THROWS(DVM_VALUE_ERROR, "-1 does not fit in a 32-bit unsigned integer",
               discovm::Value(-1).as<uint32_t>());
  EXPECT_THROWS(DVM_TYPE_ERROR, "expected str but got int", answer.as<std::string>());

  CHECK(discovm::Value(true).type_index() == kDVMBool);
  CHECK(discovm::Value(true).as<int>() == 1);
  CHECK(discovm::Value(2.5).as<double>() == 2.5);
  EXPECT_THROWS(DVM_TYPE_ERROR, "expected int but got float", discovm::Value(2.5).as<int64_t>());
  EXPECT_THROWS(DVM_TYPE_ERROR, "expected bool but got ffi.SmallStr",
               discovm::Value("abc").as<bool>());

  // Strings: inline up to 7 bytes, objects beyond; bytes kept exactly, NULs included.
  const discovm::Value small = "abc";
  const discovm::Value large = std::string("a string longer than seven bytes");
  const discovm::Value with_nul = std::string_view("a\0b", 3);
  CHECK(small.type_index() == kDVMSmallStr);
  CHECK(large.type_index() == kDVMStr);
  CHECK(small.as<std::string>() == "abc");
  CHECK(large.as<std::string>() == "a string longer than seven bytes");
  CHECK(with_nul.as<std::string>() == std::string("a\0b", 3));
  const discovm::Value bytes = discovm::Value::bytes(std::string_view("\x01\x02\x03", 3));
  CHECK(bytes.type_index() == kDVMSmallBytes);
  CHECK(bytes.as<std::string>() == "\x01\x02\x03");

  CHECK(discovm::Value().is_none());
  CHECK(discovm::Value(nullptr).is_none());
  CHECK(discovm::Value(static_cast<const char*>(nullptr)).is_none());
  CHECK(!discovm::Value().as<std::optional<int64_t>>().has_value());
  CHECK(discovm::Value(5).as<std::optional<int64_t>>() == 5);
  CHECK(discovm::Value(discovm::float32).as<DLDataType>().bits == 32);
  CHECK(discovm::Value(discovm::cpu()).as<DLDevice>().device_type == kDLCPU);
  EXPECT_THROWS(DVM_TYPE_ERROR, "expected Device but got DataType",
               discovm::Value(discovm::int8).as<DLDevice>());
  CHECK((discovm::Value::shape({2, 3}).as<std::vector<int64_t>>() == std::vector<int64_t>{2, 3}));
  EXPECT_THROWS(DVM_TYPE_ERROR, "expected ffi.Array but got int",
               answer.as<std::vector<int64_t>>());

  // Moves hand the reference over; clone takes another; release hands it to C.
  discovm::Value first = std::string("moved around, not copied");
  const void* object = first.raw().v_obj;
  CHECK(strong_count(object) == 1);
  discovm::Value second = std::move(first);
  CHECK(first.is_none());
  CHECK(second.raw().v_obj == object && strong_count(object) == 1);
  discovm::Value third = second.clone();
  CHECK(third.raw().v_obj == object && strong_count(object) == 2);
  first = std::move(third);
  CHECK(third.is_none() && strong_count(object) == 2);
  second = discovm::Value(7);  // releases its reference
  CHECK(strong_count(object) == 1);
  DVMAny handed_over = first.release();
  CHECK(first.is_none() && handed_over.v_obj == object && strong_count(object) == 1);
  discovm::Value taken_back(discovm::adopt, handed_over);
  CHECK(taken_back.as<std::string>() == "moved around, not copied");

  // A borrowed view converts to an owned copy.
  const discovm::AnyView view = taken_back;
  const discovm::Value copy = view;
  CHECK(copy.raw().v_obj == object && strong_count(object) == 2);
}

void functions() {
  const int live_before = live_callables.load();
  {
    const auto add = discovm::Function::from(
        [probe = Tracked()](int64_t a, double b) { return static_cast<double>(a) + b; });
    CHECK(add(2, 40.5).as<double>() == 42.5);
    CHECK(add(true, 1).as<double>() == 2.0);
    EXPECT_THROWS(DVM_TYPE_ERROR, "argument 0: expected int but got const char*", add("x", 1));
    EXPECT_THROWS(DVM_TYPE_ERROR, "argument 1: expected float but got ffi.SmallStr",
                 add(1, std::string("y")));
    EXPECT_THROWS(DVM_TYPE_ERROR, "expected 2 arguments but got 1", add(1));

    const auto greet = discovm::Function::from([](const std::string& who) {
      return "hello, " + who;
    });
    CHECK(greet("a reader of long strings").as<std::string>() ==
          "hello, a reader of long strings");

    const auto nothing = discovm::Function::from([](int64_t) {});
    CHECK(nothing(1).is_none());

    // Packed: the arguments as they came.
    const auto sum = discovm::Function::from([](discovm::Args args) {
      int64_t total = 0;
      for (int32_t i = 0; i < args.size(); i++) total += args[i].as<int64_t>();
      return total;
    });
    CHECK(sum().as<int64_t>() == 0);
    CHECK(sum(1, 2, 3, 4).as<int64_t>() == 10);
    const auto first_argument = discovm::Function::from([](discovm::Args args) {
      return args.at(0);  // an owned copy of a borrowed argument
    });
    CHECK(first_argument("kept beyond the call").as<std::string>() == "kept beyond the call");
    EXPECT_THROWS(DVM_INDEX_ERROR, "argument 0 out of range (0 arguments)", first_argument());

    // Exceptions thrown by the callable reach the caller with kind and message.
    const auto fail = discovm::Function::from([](int64_t x) -> int64_t {
      if (x < 0) throw discovm::Error("ValueError", "negative input " + std::to_string(x));
      if (x == 0) throw std::out_of_range("zero is out of range");
      throw discovm::Error("AttributeError", "no attribute " + std::to_string(x));
    });
    EXPECT_THROWS(DVM_VALUE_ERROR, "negative input -3", fail(-3));
    EXPECT_THROWS(DVM_RUNTIME_ERROR, "zero is out of range", fail(0));
    try {
      fail(5);
      CHECK(!"fail(5) threw");
    } catch (const discovm::Error& e) {
      CHECK(e.kind() == "AttributeError");
      CHECK(e.status() == DVM_OTHER_ERROR);
      CHECK(std::string(e.what()) == "no attribute 5");
    }

    // Functions travel as arguments and results, and errors through nested calls.
    const auto apply = discovm::Function::from(
        [](const discovm::Function& f, int64_t x) { return f(x); });
    CHECK(apply(sum, 5).as<int64_t>() == 5);
    EXPECT_THROWS(DVM_VALUE_ERROR, "negative input -1", apply(fail, -1));
    const auto make_adder = discovm::Function::from([](int64_t n) {
      return discovm::Function::from([n](int64_t x) { return x + n; });
    });
    CHECK(make_adder(3).as<discovm::Function>()(4).as<int64_t>() == 7);

    // The registry.
    discovm::Function::from([](int64_t x) { return 2 * x; }).register_global("cxx_test.twice");
    CHECK(discovm::Function::get_global("cxx_test.twice")(21).as<int64_t>() == 42);
    const std::vector<std::string> names = discovm::Function::global_names();
    CHECK(std::find(names.begin(), names.end(), "cxx_test.twice") != names.end());
    EXPECT_THROWS(DVM_VALUE_ERROR, "`cxx_test.twice` is already registered",
                 sum.register_global("cxx_test.twice"));
    sum.register_global("cxx_test.twice", true);
    CHECK(discovm::Function::get_global("cxx_test.twice")(21, 1).as<int64_t>() == 22);
    discovm::Function::remove_global("cxx_test.twice");
    EXPECT_THROWS(DVM_KEY_ERROR, "cxx_test.twice", discovm::Function::get_global("cxx_test.twice"));
    EXPECT_THROWS(DVM_KEY_ERROR, "cxx_test.twice",
                 discovm::Function::remove_global("cxx_test.twice"));
  }
  CHECK(live_callables.load() == live_before);

  // Handles move, clone and hand over their reference.
  discovm::Function f = discovm::Function::from([probe = Tracked()](int64_t x) { return x + 1; });
  CHECK(live_callables.load() == live_before + 1);
  discovm::Function g = std::move(f);
  CHECK(!f && g && f.raw() == nullptr);
  EXPECT_THROWS(DVM_VALUE_ERROR, "NULL", f(1));
  CHECK(g(1).as<int64_t>() == 2);
  discovm::Function h = g.clone();
  CHECK(h.raw() == g.raw() && strong_count(h.raw()) == 2);
  g = discovm::Function();  // drops one reference; the callable lives on in h
  CHECK(strong_count(h.raw()) == 1 && live_callables.load() == live_before + 1);
  dvm_func* raw = h.release();
  CHECK(!h);
  discovm::Function adopted(discovm::adopt, raw);
  CHECK(adopted(41).as<int64_t>() == 42);
  adopted = discovm::Function::from([](int64_t x) { return x; });  // the old one is released
  CHECK(live_callables.load() == live_before);
  const discovm::Value held = adopted;  // a Value holding a function takes a reference
  CHECK(strong_count(adopted.raw()) == 2);
  CHECK(held.as<discovm::Function>()(9).as<int64_t>() == 9);
}

void sessions() {
  discovm::Function::from([](int64_t i, double d, const std::string& name, discovm::Tensor t) {
    const int64_t total = i + static_cast<int64_t>(2 * d) + static_cast<int64_t>(t.item<float>());
    return name + " " + std::to_string(discovm::current_worker_id()) + " " +
           std::to_string(total);
  }).register_global("cxx_test.describe");
  discovm::Function::from([](int64_t x) { return x * (discovm::current_worker_id() + 1); })
      .register_global("cxx_test.scale");
  discovm::Function::from([]() { return discovm::Worker::current().id(); })
      .register_global("cxx_test.whoami");
  discovm::Function::from([](int64_t x) -> int64_t {
    throw discovm::Error("ValueError", "bad input " + std::to_string(x));
  }).register_global("cxx_test.fail");

  discovm::Session session(4);
  CHECK(session.num_workers() == 4);
  {
    const discovm::DRef describe = session.get_global_func("cxx_test.describe");
    const discovm::Tensor seven = discovm::Tensor::empty({1}, discovm::float32);
    seven.write(std::vector<float>{7.0f});
    const discovm::DRef described = session.call(describe, 1, 2.5, "name", seven);
    for (int32_t w = 0; w < 4; w++) {
      CHECK(described.get<std::string>(w) == "name " + std::to_string(w) + " 13");
    }

    // A DRef argument becomes each worker's own value.
    const discovm::DRef scale = session.get_global_func("cxx_test.scale");
    const discovm::DRef scaled = session.call(scale, 10);
    const discovm::DRef twice = session.call(scale, scaled);
    for (int32_t w = 0; w < 4; w++) CHECK(twice.get<int64_t>(w) == 10 * (w + 1) * (w + 1));
    scaled.set(1, "set from the controller");
    CHECK(scaled.get<std::string>(1) == "set from the controller");

    // One worker.
    const discovm::Worker worker = session.worker(2);
    CHECK(worker.id() == 2);
    CHECK(worker.device().device_type == kDLCPU);
    const discovm::DRef alone = worker.call(scale, 5);
    worker.sync();
    CHECK(alone.get<int64_t>(2) == 15);
    EXPECT_THROWS(DVM_WORKER_ERROR, "worker 0", alone.get(0));
    const discovm::DRef whoami = session.call(session.get_global_func("cxx_test.whoami"));
    for (int32_t w = 0; w < 4; w++) CHECK(whoami.get<int32_t>(w) == w);
    EXPECT_THROWS(DVM_RUNTIME_ERROR, "off a worker thread", discovm::Worker::current());

    // Failures.
    EXPECT_THROWS(DVM_KEY_ERROR, "cxx_test.missing", session.get_global_func("cxx_test.missing"));
    EXPECT_THROWS(DVM_INDEX_ERROR, "worker 9 out of range (session has 4 workers)",
                 session.worker(9));
    EXPECT_THROWS(DVM_INDEX_ERROR, "out of range", session.sync_worker(-1));
    const discovm::DRef failed = session.call(session.get_global_func("cxx_test.fail"), 7);
    EXPECT_THROWS(DVM_WORKER_ERROR, "bad input 7", session.sync_all());
    EXPECT_THROWS(DVM_WORKER_ERROR, "bad input 7", failed.get(3));
    EXPECT_THROWS(DVM_TYPE_ERROR, "DLTensor*", session.call(scale, &seven.dl()));

    // Modules: this library is one, so each worker calls its `current_worker_id`.
    Dl_info info;
    CHECK(dladdr(reinterpret_cast<void*>(&dvm_version), &info) != 0);
    const discovm::DRef module = session.load_module(info.dli_fname);
    const discovm::DRef ids = session.call(session.module_func(module, "current_worker_id"));
    for (int32_t w = 0; w < 4; w++) CHECK(ids.get<int32_t>(w) == w);
    EXPECT_THROWS(DVM_VALUE_ERROR, "/nonexistent.so", session.load_module("/nonexistent.so"));
    EXPECT_THROWS(DVM_KEY_ERROR, "__tvm_ffi_missing", session.module_func(module, "missing"));

    // A tensor on worker 0, to it and back.
    const discovm::DRef empty = session.get_global_func("runtime.disco.empty");
    const discovm::DRef remote =
        session.call(empty, discovm::Value::shape({2, 3}), discovm::float32, nullptr, true);
    const discovm::Tensor sent = discovm::Tensor::empty({2, 3}, discovm::float32);
    sent.write(std::vector<float>{1, 2, 3, 4, 5, 6});
    session.copy_to_worker0(sent.dl(), remote);
    const discovm::Tensor received = discovm::Tensor::empty({2, 3}, discovm::float32);
    session.copy_from_worker0(received.dl(), remote);
    CHECK((received.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6}));
    const discovm::Tensor wrong = discovm::Tensor::empty({3}, discovm::float32);
    EXPECT_THROWS(DVM_VALUE_ERROR, "does not match the remote tensor [2, 3]",
                 session.copy_to_worker0(wrong.dl(), remote));

    // Collectives.
    EXPECT_THROWS(DVM_VALUE_ERROR, "nope", session.init_ccl("nope"));
    session.init_ccl("cpu");
    const discovm::DRef barrier = session.call(session.get_global_func("runtime.disco.barrier"));
    session.sync_all();
  }
  for (int32_t w = 0; w < 4; w++) CHECK(session.live_registers(w) == 0);

  // Moving a session keeps it running; shutting down closes it for every handle.
  discovm::Session moved = std::move(session);
  CHECK(!session && moved.num_workers() == 4);
  const discovm::Worker kept = moved.worker(0);
  moved.shutdown();
  EXPECT_THROWS(DVM_SESSION_CLOSED, "", moved.get_global_func("cxx_test.scale"));
  EXPECT_THROWS(DVM_SESSION_CLOSED, "", kept.sync());
  EXPECT_THROWS(DVM_VALUE_ERROR, "NULL", session.sync_all());

  discovm::SessionOptions options;
  options.timeout = std::chrono::seconds(30);
  options.cpu_affinity = {-1, -1};
  const discovm::Session pinned(2, 2, options);
  CHECK(pinned.num_workers() == 2);
  options.cpu_affinity = {-1};
  EXPECT_THROWS(DVM_VALUE_ERROR, "cpu_affinity holds 1 CPU ids for 2 workers", discovm::Session(2, 1, options));
  EXPECT_THROWS(DVM_VALUE_ERROR, "num_workers", discovm::Session(0));

  for (const char* name : {"cxx_test.describe", "cxx_test.scale", "cxx_test.whoami",
                           "cxx_test.fail"}) {
    discovm::Function::remove_global(name);
  }
}

void streams_and_tensors() {
  CHECK(discovm::device_count(kDLCPU) == 1);
  CHECK(discovm::version() == dvm_version());

  const std::vector<float> values{1.5f, 2.5f, 3.5f, 4.5f};
  const discovm::Tensor source = discovm::Tensor::empty({4}, discovm::float32);
  CHECK((source.shape() == std::vector<int64_t>{4}));
  CHECK(source.numel() == 4 && source.nbytes() == 16);
  CHECK(source.dtype().code == kDLFloat && source.device().device_type == kDLCPU);
  source.write(values);

  const discovm::Stream upload(discovm::cpu());
  const discovm::Stream compute(discovm::cpu());
  const discovm::Tensor middle = discovm::Tensor::empty({4}, discovm::float32);
  const discovm::Tensor result = discovm::Tensor::empty({4}, discovm::float32);
  upload.copy(middle, source);
  compute.wait_for(upload);
  compute.copy(result, middle);
  CHECK(result.to_vector<float>() == values);
  CHECK(result.item<float>() == 1.5f);
  upload.sync();
  compute.sync();
  EXPECT_THROWS(DVM_TYPE_ERROR, "the tensor holds float32, not int32", result.to_vector<int32_t>());
  EXPECT_THROWS(DVM_VALUE_ERROR, "shape",
               upload.copy(discovm::Tensor::empty({2, 2}, discovm::float32), source));
  EXPECT_THROWS(DVM_VALUE_ERROR, "device",
               discovm::Stream(DLDevice{kDLCPU, 3}));
  if (discovm::device_count(kDLCUDA) == 0) {
    EXPECT_THROWS(DVM_DEVICE_UNAVAILABLE, "", discovm::Stream(discovm::cuda(0)));
  }

  // DLPack: the export keeps the tensor alive until its deleter runs, exactly once.
  CHECK(strong_count(source.raw()) == 1);
  DLManagedTensorVersioned* exported = source.to_dlpack();
  CHECK(strong_count(source.raw()) == 2);
  {
    const discovm::Tensor imported = discovm::Tensor::from_dlpack(exported);
    CHECK(imported.dl().data == source.dl().data);
    CHECK(imported.to_vector<float>() == values);
  }
  CHECK(strong_count(source.raw()) == 1);
  EXPECT_THROWS(DVM_VALUE_ERROR, "NULL", discovm::Tensor::from_dlpack(nullptr));

  // Tensors as values, and empty handles.
  const discovm::Value as_value = source;
  CHECK(as_value.type_index() == kDVMTensor && strong_count(source.raw()) == 2);
  CHECK(as_value.as<const DLTensor*>() == &source.dl());
  CHECK(as_value.as<discovm::Tensor>().item<float>() == 1.5f);
  discovm::Tensor moved = source.clone();
  const discovm::Tensor taken = std::move(moved);
  CHECK(!moved && taken.raw() == source.raw());
  float scratch = 0;
  EXPECT_THROWS(DVM_VALUE_ERROR, "NULL", moved.read(&scratch, sizeof scratch));
  EXPECT_THROWS(DVM_VALUE_ERROR, "empty", moved.dl());
  std::vector<discovm::Tensor> many;
  for (int i = 0; i < 8; i++) many.push_back(discovm::Tensor::empty({1}, discovm::int64));
  many.erase(many.begin());
  CHECK(many.size() == 7 && many.front().dtype().bits == 64);
}

}  // namespace

int main() {
  values();
  functions();
  sessions();
  streams_and_tensors();
  return check_finish();
}
