/*
 * session_cpp.cpp: sessions from C++, with the header-only interface include/discovm.hpp.
 * Make a packed function from a lambda, start a session of worker threads, broadcast calls to
 * them, read each worker's result, copy a tensor to worker 0 and back, and handle a failure.
 *
 * The interface owns every reference it hands out: handles (sessions, DRefs, tensors, ...)
 * release theirs when they go out of scope, and failures are thrown as discovm::Error with the
 * error's kind and message. (examples-c/session_broadcast.c is the same program in C.)
 *
 * Build and run from the repository root:
 *
 *   cargo build
 *   c++ -std=c++17 -Iinclude examples-c/session_cpp.cpp -Ltarget/debug -ldiscovm \
 *       -Wl,-rpath,"$PWD/target/debug" -o session_cpp
 *   ./session_cpp
 *
 * or, against an installed discovm (`make install`):
 *
 *   c++ -std=c++17 session_cpp.cpp $(pkg-config --cflags --libs discovm) -o session_cpp
 */
#include <cstdio>
#include <string>
#include <vector>

#include "discovm.hpp"

int main() {
  try {
    // Step 1: a function for the workers, from a lambda. Its parameters are converted from the
    // caller's arguments (a wrong type is a TypeError naming the argument), and it runs on each
    // worker's thread, several at once. Registering it under a global name lets the workers
    // find it; the registry keeps the function alive.
    discovm::Function::from([](int64_t x) { return x * (discovm::current_worker_id() + 1); })
        .register_global("example.scale");

    // Step 2: start a session of 4 worker threads (one group, default options).
    discovm::Session session(4);
    std::printf("started a session of %d workers\n", session.num_workers());

    // Step 3: look the function up for the session. The name is resolved now, so a typo fails
    // here with a KeyError; the DRef names the function on every worker.
    const discovm::DRef scale = session.get_global_func("example.scale");

    // Step 4: broadcast a call. It returns at once with a DRef to the results; each worker
    // runs the call on its own thread.
    const discovm::DRef results = session.call(scale, 10);

    // Step 5: read each worker's result; get<T>(worker) waits for that worker to get there.
    for (int32_t w = 0; w < session.num_workers(); w++) {
      std::printf("example.scale(10) on worker %d = %lld\n", w,
                  static_cast<long long>(results.get<int64_t>(w)));
    }

    // Step 6: a DRef passed as an argument becomes each worker's own value of that register,
    // without leaving the workers: worker w computes 10 * (w + 1) * (w + 1).
    const discovm::DRef squared = session.call(scale, results);
    std::printf("example.scale(previous result) on each worker:");
    for (int32_t w = 0; w < session.num_workers(); w++) {
      std::printf(" %lld", static_cast<long long>(squared.get<int64_t>(w)));
    }
    std::printf("\n");

    // Step 7: a 2x3 float32 tensor on worker 0, from the built-in runtime.disco.empty
    // (shape, dtype, device: None for the worker's own, worker0_only: true).
    const discovm::DRef empty = session.get_global_func("runtime.disco.empty");
    const discovm::DRef remote =
        session.call(empty, discovm::Value::shape({2, 3}), discovm::float32, nullptr, true);

    // Step 8: copy a host tensor to worker 0 and back. copy_from_worker0 returns with the
    // host tensor filled.
    const discovm::Tensor sent = discovm::Tensor::empty({2, 3}, discovm::float32);
    sent.write(std::vector<float>{1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f});
    const discovm::Tensor received = discovm::Tensor::empty({2, 3}, discovm::float32);
    session.copy_to_worker0(sent.dl(), remote);
    session.copy_from_worker0(received.dl(), remote);
    const std::vector<float> values = received.to_vector<float>();
    std::printf("copied to worker 0 and back: [[%g, %g, %g], [%g, %g, %g]]\n", values[0],
                values[1], values[2], values[3], values[4], values[5]);

    // Step 9: a call that fails on the workers (a string where the lambda takes an int) is
    // reported by the next wait, as a WorkerError that names the worker and the cause.
    session.call(scale, "ten");
    try {
      session.sync_all();
    } catch (const discovm::Error& e) {
      std::printf("a bad call failed as expected: %s: %s\n", e.kind().c_str(), e.what());
    }

    // Step 10: shut down: the workers stop once their work is done. The handles release their
    // references when they go out of scope (a DRef frees its register on every worker).
    session.shutdown();
    discovm::Function::remove_global("example.scale");
    std::printf("session shut down\n");
  } catch (const discovm::Error& e) {
    // Any other failure: its kind ("KeyError", "WorkerError", ...) and message.
    std::fprintf(stderr, "failed: %s: %s\n", e.kind().c_str(), e.what());
    return 1;
  }
  return 0;
}
