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
 *
 * The collectives between the nodes (step 5) run with Gloo, through the plugin `make lib`
 * builds next to the library where Gloo is installed (Debian: libgloo-dev); without it this
 * program says so and skips them.
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

/* A DVMAny that refers to a DRef (each worker sees its own register value). */
static DVMAny dref_value(dvm_dref* ref) {
  DVMAny v;
  memset(&v, 0, sizeof v);
  v.type_index = ((const DVMObject*)ref)->type_index;
  v.v_obj = (DVMObject*)ref;
  return v;
}

static DVMAny bool_value(int b) {
  DVMAny v;
  memset(&v, 0, sizeof v);
  v.type_index = kDVMBool;
  v.v_int64 = b;
  return v;
}

/* Calls built-in `name` with `args` on every worker and waits for them. */
static void on_every_worker(dvm_session* session, const char* name, DVMAny* args, int n) {
  dvm_dref *fn, *out;
  CHECK(dvm_session_get_global_func(session, name, &fn));
  CHECK(dvm_session_call(session, fn, args, n, &out));
  CHECK(dvm_session_sync_all(session));
  dvm_dref_free(out);
  dvm_dref_free(fn);
}

/* Step 5: worker 0 broadcasts 1 2 3 4 to node 1's worker, then both sum theirs (allreduce). */
static int collectives_between_nodes(dvm_session* session) {
  dvm_status status = dvm_session_init_ccl(session, "cpu", NULL, 0);
  if (status == DVM_DEVICE_UNAVAILABLE) {
    printf("no collectives between nodes here: %s\n", dvm_last_error_message());
    return 0;
  }
  check(status, "dvm_session_init_ccl(session, \"cpu\", NULL, 0)");
  int64_t shape[1] = {4};
  DVMAny empty_args[4];
  memset(empty_args, 0, sizeof empty_args);
  CHECK(dvm_shape_new(shape, 1, &empty_args[0]));
  empty_args[1].type_index = kDVMDataType;
  empty_args[1].v_dtype = (DLDataType){kDLFloat, 32, 1};
  empty_args[3] = bool_value(0);
  dvm_dref *empty_fn, *data, *sum;
  CHECK(dvm_session_get_global_func(session, "runtime.disco.empty", &empty_fn));
  CHECK(dvm_session_call(session, empty_fn, empty_args, 4, &data));
  CHECK(dvm_session_call(session, empty_fn, empty_args, 4, &sum));
  CHECK(dvm_any_release(&empty_args[0]));
  dvm_dref_free(empty_fn);

  float host[4] = {1, 2, 3, 4};
  DLTensor host_tensor = {host, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  CHECK(dvm_session_copy_to_worker0(session, &host_tensor, data));
  /* broadcast_from_worker0(send, in_group, recv), in place. */
  DVMAny broadcast_args[3] = {dref_value(data), bool_value(0), dref_value(data)};
  on_every_worker(session, "runtime.disco.broadcast_from_worker0", broadcast_args, 3);
  /* allreduce(send, Shape([kind]), in_group, recv), kind 0: sum. */
  int64_t kind[1] = {0};
  DVMAny allreduce_args[4] = {dref_value(data), {0}, bool_value(0), dref_value(sum)};
  CHECK(dvm_shape_new(kind, 1, &allreduce_args[1]));
  on_every_worker(session, "runtime.disco.allreduce", allreduce_args, 4);
  CHECK(dvm_any_release(&allreduce_args[1]));

  CHECK(dvm_session_copy_from_worker0(session, &host_tensor, sum));
  printf("broadcast from worker 0, then summed across the nodes:");
  int wrong = 0;
  for (int i = 0; i < 4; i++) {
    printf(" %g", host[i]);
    wrong |= host[i] != 2.0f * (float)(i + 1);
  }
  printf("\n");
  dvm_dref_free(sum);
  dvm_dref_free(data);
  return wrong;
}

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

  dvm_dref_free(ranks);
  dvm_dref_free(rank);
  if (collectives_between_nodes(session) != 0) {
    fprintf(stderr, "the collectives between the nodes gave a wrong result\n");
    return 1;
  }

  /* Step 6: shutting down stops node 1's workers; the node program then exits with 0. */
  CHECK(dvm_session_shutdown(session));
  dvm_session_free(session);
  int status = 0;
  waitpid(node, &status, 0);
  printf("node 1 exited with status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
