// The Gloo plugin: Gloo's collectives between the workers of a session across machines, behind
// a small C ABI that the library loads at run time (so the library builds and runs without
// Gloo). Built from Debian's libgloo-dev by `make lib`, next to the library.
//
// The one idea: the plugin does no rendezvous of its own. `dvm_gloo_open` binds a TCP pair
// for every peer and hands out their addresses; the library carries them over its own
// authenticated connections and gives each rank its peers' addresses in `dvm_gloo_connect`.
// Everything else is Gloo's: its algorithms, its transport, its timeouts.
//
// Every entry point catches Gloo's exceptions and returns -1 with the message in `err`; none
// lets an exception out.

#include <cstdint>
#include <cstring>
#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/context.h>
#include <gloo/gather.h>
#include <gloo/scatter.h>
#include <gloo/transport/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

// The TCP pair's way to fail its waiting operations from another thread. Its header needs one
// that some packages of Gloo leave out (gloo/common/memory.h); without it, the one member
// function used here is declared alone. It is not virtual, and the generic pair is the TCP
// pair's first base, so the call reaches the library's function with the right object.
#if __has_include(<gloo/common/memory.h>)
#include <gloo/transport/tcp/pair.h>
#else
namespace gloo::transport::tcp {
class Pair : public ::gloo::transport::Pair {
 public:
  std::exception_ptr signalExceptionExternal(const std::string& msg);
};
}  // namespace gloo::transport::tcp
#endif

namespace {

// The version of this C ABI; the library refuses a plugin of another.
constexpr int kAbiVersion = 3;

// Where point-to-point transfers meet, apart from the slots of Gloo's collectives.
constexpr uint64_t kTransferSlot = 0x6476'6d00'0000'0000ULL;

// A Gloo context whose pairs the library connects, from addresses it carried itself.
class Mesh : public gloo::Context {
 public:
  Mesh(int rank, int size, std::shared_ptr<gloo::transport::Device> device,
       std::chrono::milliseconds timeout)
      : gloo::Context(rank, size) {
    device_ = std::move(device);
    transportContext_ = device_->createContext(rank, size);
    transportContext_->setTimeout(timeout);
    setTimeout(timeout);
    for (int peer = 0; peer < size; ++peer) {
      if (peer != rank) {
        transportContext_->createPair(peer);
      }
    }
  }

  std::vector<char> address(int peer) { return getPair(peer)->address().bytes(); }

  void connect(int peer, const std::vector<char>& address) { getPair(peer)->connect(address); }

  // Fails every operation waiting on a pair of this context, now and later, with `why`. Safe
  // from any thread: each pair takes its own lock, and the pairs themselves never change once
  // made.
  void abort(const std::string& why) {
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) {
        continue;
      }
      // Every pair of a mesh is a TCP pair: `dvm_gloo_open` makes them on a TCP device.
      auto* pair = static_cast<gloo::transport::tcp::Pair*>(getPair(peer).get());
      pair->signalExceptionExternal(why);
    }
  }
};

void report(char* err, size_t cap, const char* what) {
  if (err != nullptr && cap > 0) {
    std::strncpy(err, what, cap - 1);
    err[cap - 1] = '\0';
  }
}

// Runs `body`, turning an exception into -1 and its message.
template <typename Body>
int guarded(char* err, size_t cap, Body body) {
  try {
    body();
    return 0;
  } catch (const std::exception& e) {
    report(err, cap, e.what());
  } catch (...) {
    report(err, cap, "an unknown C++ exception");
  }
  return -1;
}

Mesh& mesh(void* ctx) { return *static_cast<Mesh*>(ctx); }

std::shared_ptr<gloo::Context> shared(void* ctx) {
  // The library owns the context (dvm_gloo_close frees it); Gloo's options only borrow it.
  return std::shared_ptr<gloo::Context>(&mesh(ctx), [](gloo::Context*) {});
}

uint8_t* bytes(void* p) { return static_cast<uint8_t*>(p); }
uint8_t* bytes(const void* p) { return const_cast<uint8_t*>(static_cast<const uint8_t*>(p)); }

// Gloo sizes segments by the element type: one of each width the library reduces.
template <size_t N>
struct Element {
  uint8_t raw[N];
};

template <size_t N>
void allreduce_of(void* ctx, const void* in, void* out, size_t count,
                  gloo::AllreduceOptions::Func fn) {
  gloo::AllreduceOptions opts(shared(ctx));
  opts.setInput(const_cast<Element<N>*>(static_cast<const Element<N>*>(in)), count);
  opts.setOutput(static_cast<Element<N>*>(out), count);
  opts.setReduceFunction(fn);
  opts.setTimeout(mesh(ctx).getTimeout());
  gloo::allreduce(opts);
}

}  // namespace

extern "C" {

// Combines `n` elements: out[i] = a[i] (op) b[i]; `user` is the library's.
typedef void (*dvm_gloo_reduce_fn)(void* user, void* out, const void* a, const void* b,
                                   size_t n);

int dvm_gloo_abi_version(void) { return kAbiVersion; }

// Rank `rank` of `size`: binds a TCP pair for every peer on `host` (an address of this
// machine the peers reach). Returns the context, or NULL with the reason in `err`.
void* dvm_gloo_open(const char* host, int rank, int size, int64_t timeout_ms, char* err,
                    size_t cap) {
  Mesh* made = nullptr;
  guarded(err, cap, [&] {
    gloo::transport::tcp::attr attr(host);
    auto device = gloo::transport::tcp::CreateDevice(attr);
    made = new Mesh(rank, size, device, std::chrono::milliseconds(timeout_ms));
  });
  return made;
}

// Writes the address of this rank's pair for `peer` into `buf`; returns its length, or -1.
int64_t dvm_gloo_address(void* ctx, int peer, char* buf, size_t buf_cap, char* err, size_t cap) {
  int64_t len = -1;
  guarded(err, cap, [&] {
    auto address = mesh(ctx).address(peer);
    if (address.size() > buf_cap) {
      throw std::length_error("a pair's address is longer than the buffer for it");
    }
    std::memcpy(buf, address.data(), address.size());
    len = static_cast<int64_t>(address.size());
  });
  return len;
}

// Connects this rank's pair for `peer` to `peer`'s address for this rank.
int dvm_gloo_connect(void* ctx, int peer, const char* address, size_t len, char* err,
                     size_t cap) {
  return guarded(err, cap, [&] { mesh(ctx).connect(peer, std::vector<char>(address, address + len)); });
}

// Reduces `count` elements of `elem_size` bytes at `in` across the ranks into `out` (which
// may be `in`), with `fn`.
int dvm_gloo_allreduce(void* ctx, const void* in, void* out, size_t count, size_t elem_size,
                       dvm_gloo_reduce_fn fn, void* user, char* err, size_t cap) {
  return guarded(err, cap, [&] {
    gloo::AllreduceOptions::Func reduce = [fn, user](void* out, const void* a, const void* b,
                                                     size_t n) { fn(user, out, a, b, n); };
    switch (elem_size) {
      case 1: allreduce_of<1>(ctx, in, out, count, reduce); break;
      case 2: allreduce_of<2>(ctx, in, out, count, reduce); break;
      case 4: allreduce_of<4>(ctx, in, out, count, reduce); break;
      case 8: allreduce_of<8>(ctx, in, out, count, reduce); break;
      default: throw std::invalid_argument("elements of 1, 2, 4 or 8 bytes only");
    }
  });
}

// Every rank's `len` bytes at `in`, by rank, into `out`.
int dvm_gloo_allgather(void* ctx, const void* in, void* out, size_t len, char* err, size_t cap) {
  return guarded(err, cap, [&] {
    gloo::AllgatherOptions opts(shared(ctx));
    opts.setInput(bytes(in), len);
    opts.setOutput(bytes(out), len * static_cast<size_t>(mesh(ctx).size));
    opts.setTimeout(mesh(ctx).getTimeout());
    gloo::allgather(opts);
  });
}

// Rank `root`'s `len` bytes at `buf` into every rank's `buf`.
int dvm_gloo_broadcast(void* ctx, void* buf, size_t len, int root, char* err, size_t cap) {
  return guarded(err, cap, [&] {
    gloo::BroadcastOptions opts(shared(ctx));
    if (mesh(ctx).rank == root) {
      opts.setInput(bytes(buf), len);
    }
    opts.setOutput(bytes(buf), len);
    opts.setRoot(root);
    opts.setTimeout(mesh(ctx).getTimeout());
    gloo::broadcast(opts);
  });
}

// Part r of `root`'s `in` (`len` bytes each) into rank r's `out`.
int dvm_gloo_scatter(void* ctx, const void* in, void* out, size_t len, int root, char* err,
                     size_t cap) {
  return guarded(err, cap, [&] {
    gloo::ScatterOptions opts(shared(ctx));
    if (mesh(ctx).rank == root) {
      std::vector<uint8_t*> parts;
      for (int r = 0; r < mesh(ctx).size; ++r) {
        parts.push_back(bytes(in) + static_cast<size_t>(r) * len);
      }
      opts.setInputs(parts, len);
    }
    opts.setOutput(bytes(out), len);
    opts.setRoot(root);
    opts.setTimeout(mesh(ctx).getTimeout());
    gloo::scatter(opts);
  });
}

// Every rank's `len` bytes at `in`, by rank, into `root`'s `out`.
int dvm_gloo_gather(void* ctx, const void* in, void* out, size_t len, int root, char* err,
                    size_t cap) {
  return guarded(err, cap, [&] {
    gloo::GatherOptions opts(shared(ctx));
    opts.setInput(bytes(in), len);
    if (mesh(ctx).rank == root) {
      opts.setOutput(bytes(out), len * static_cast<size_t>(mesh(ctx).size));
    }
    opts.setRoot(root);
    opts.setTimeout(mesh(ctx).getTimeout());
    gloo::gather(opts);
  });
}

int dvm_gloo_barrier(void* ctx, char* err, size_t cap) {
  return guarded(err, cap, [&] {
    gloo::BarrierOptions opts(shared(ctx));
    opts.setTimeout(mesh(ctx).getTimeout());
    gloo::barrier(opts);
  });
}

// Sends `len` bytes at `buf` to `peer` and waits until they left.
int dvm_gloo_send(void* ctx, const void* buf, size_t len, int peer, char* err, size_t cap) {
  return guarded(err, cap, [&] {
    auto unbound = mesh(ctx).createUnboundBuffer(bytes(buf), len);
    unbound->send(peer, kTransferSlot);
    unbound->waitSend(mesh(ctx).getTimeout());
  });
}

// Receives `len` bytes from `peer` into `buf`.
int dvm_gloo_recv(void* ctx, void* buf, size_t len, int peer, char* err, size_t cap) {
  return guarded(err, cap, [&] {
    auto unbound = mesh(ctx).createUnboundBuffer(buf, len);
    unbound->recv(peer, kTransferSlot);
    unbound->waitRecv(mesh(ctx).getTimeout());
  });
}

// Fails the operations waiting on the context, from any thread (the context is broken after).
void dvm_gloo_abort(void* ctx, const char* why) {
  try {
    mesh(ctx).abort(why != nullptr ? why : "aborted");
  } catch (...) {
    // A pair that cannot take the exception is already failing its operations.
  }
}

void dvm_gloo_close(void* ctx) { delete static_cast<Mesh*>(ctx); }

}  // extern "C"
