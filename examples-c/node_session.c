/*
 * node_session.c: a session across two machines, shown on one. This program is the controller
 * and node 0 (with one worker process of its own); it starts the node program (discovm-node)
 * as node 1, as you would on another machine with ssh or srun, and both prove they hold the
 * same secret before the node may join.
 *
 * Build the library and its programs (`make lib` puts discovm-node and discovm-worker next to
 * it), then:
 *
 *   cc -std=c11 -Iinclude examples-c/node_session.c -Ltarget/debug -ldiscovm \
 *      -Wl,-rpath,"$PWD/target/debug" -o node_session
 *   ./node_session target/debug/discovm-node
 *
 * On two machines: `DISCOVM_SESSION_TOKEN=... discovm-node CONTROLLER_HOST PORT 1` on the
 * second, and dvm_session_new_socket(2, 1, 1, "0.0.0.0", PORT, ...) on the first.
 */
#define _POSIX_C_SOURCE 200809L
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "discovm.h"
#include "example_check.h" /* CHECK(call): stops with the error if a call fails */

/* A TCP port nothing listens on now. */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || bind(fd, (struct sockaddr*)&addr, sizeof addr) != 0 ||
      getsockname(fd, (struct sockaddr*)&addr, &len) != 0) {
    perror("finding a free port");
    exit(1);
  }
  close(fd);
  return ntohs(addr.sin_port);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s NODE_PROGRAM\n", argv[0]);
    return 2;
  }
  /* Step 1: the session's secret, which the node inherits here (on another machine, set it
   * there too). */
  setenv("DISCOVM_SESSION_TOKEN", "an example secret", 1);
  int port = free_port();
  char port_text[16];
  snprintf(port_text, sizeof port_text, "%d", port);

  /* Step 2: node 1, as another machine would start it: HOST PORT WORKERS. It retries until
   * the controller listens. */
  pid_t node = fork();
  if (node == 0) {
    execl(argv[1], argv[1], "127.0.0.1", port_text, "1", (char*)NULL);
    perror("starting the node program");
    _exit(127);
  }

  /* Step 3: the controller listens until node 1 joined, then stops listening. */
  dvm_session_options options;
  memset(&options, 0, sizeof options);
  options.timeout_ms = 60000;
  dvm_session* session;
  CHECK(dvm_session_new_socket(2, 1, 1, "127.0.0.1", port, &options, &session));
  printf("a session of %d workers on 2 nodes\n", dvm_session_num_workers(session));

  /* Step 4: calls reach every worker, wherever it runs. */
  dvm_dref* rank;
  CHECK(dvm_session_get_global_func(session, "runtime.disco.worker_rank", &rank));
  dvm_dref* ranks;
  CHECK(dvm_session_call(session, rank, NULL, 0, &ranks));
  for (int32_t w = 0; w < 2; w++) {
    DVMAny v;
    CHECK(dvm_dref_get(ranks, w, &v));
    printf("worker %d (node %d) says it is worker %lld\n", (int)w, (int)w, (long long)v.v_int64);
  }

  /* Step 5: shutting down stops node 1's workers; the node program then exits with 0. */
  dvm_dref_free(ranks);
  dvm_dref_free(rank);
  CHECK(dvm_session_shutdown(session));
  dvm_session_free(session);
  int status = 0;
  waitpid(node, &status, 0);
  printf("node 1 exited with status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
