// A C++ program built against an installed discovm through CMake (see CMakeLists.txt). It asks
// each worker of a two-worker session for its rank, and for a function that does not exist.
#include <cstdio>

#include "discovm.hpp"

int main() {
  try {
    const discovm::Session session(2);
    const discovm::DRef ranks =
        session.call(session.get_global_func("runtime.disco.worker_rank"));
    std::printf("discovm %s from C++: worker ranks %lld %lld\n", discovm::version().c_str(),
                static_cast<long long>(ranks.get<int64_t>(0)),
                static_cast<long long>(ranks.get<int64_t>(1)));
    try {
      session.get_global_func("no.such.function");
    } catch (const discovm::Error& e) {
      std::printf("a missing function is a %s\n", e.kind().c_str());
    }
    session.shutdown();
  } catch (const discovm::Error& e) {
    std::fprintf(stderr, "failed: %s: %s\n", e.kind().c_str(), e.what());
    return 1;
  }
  return 0;
}
