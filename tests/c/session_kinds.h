/*
 * session_kinds.h: sessions of each kind for the C test programs that are also their own worker
 * and node programs (their main serves `PROGRAM node HOST PORT WORKERS` with dvm_node_main, and
 * other unknown arguments with dvm_worker_main).
 *
 *   start_session(kind, n, devices, timeout_ms)
 *       a session of n workers in one group on `devices`: "threads", "processes" (running this
 *       program), or "nodes": this machine runs the first half of the workers, a second node
 *       (this program, as a child process that sees only the GPUs after this node's, through
 *       CUDA_VISIBLE_DEVICES) the rest
 *   finish_session(s)   shuts the session down, frees it, and waits for its second node
 *   serve_unless_controller(argc, argv)
 *                       serves as a node or a worker process and returns the exit status, or
 *                       returns -1 for the controller; kind_asked(argc, argv, kind) then says
 *                       whether it runs `kind` (kSessionKinds lists them in order)
 *   start_nccl(s, program, kind)
 *                       init_ccl("nccl") on s: 0 when it worked; else the session is finished,
 *                       and the program's exit status is returned: 77 (skipped) where NCCL
 *                       cannot be loaded, 1 for another failure (each said)
 */
#ifndef DISCOVM_TESTS_SESSION_KINDS_H
#define DISCOVM_TESTS_SESSION_KINDS_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "cuda_check.h"

/* The session kinds, in the order the programs run them. */
static const char* const kSessionKinds[3] = {"threads", "processes", "nodes"};

/* For a program that is its own worker and node program, once its functions are registered:
 * as `PROGRAM node HOST PORT WORKERS` it serves as a node, and with arguments other than one
 * kind as a worker process; either way it returns the program's exit status. Otherwise it
 * returns -1: the program is the controller, of every kind (no argument) or of the one named. */
static int serve_unless_controller(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "node") == 0) return dvm_node_main(argc - 1, argv + 1);
  int controller = argc == 1;
  for (int k = 0; k < 3; k++) controller |= argc == 2 && strcmp(argv[1], kSessionKinds[k]) == 0;
  return controller ? -1 : dvm_worker_main(argc, argv);
}

/* Whether a controller's arguments ask for session kind `kind` (none: every kind). */
static int kind_asked(int argc, char** argv, const char* kind) {
  return argc == 1 || strcmp(argv[1], kind) == 0;
}

/* The second node of a session of nodes, a child process; 0 when there is none. */
static pid_t node_pid;

/* A loopback port nothing listens on now. */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in at;
  memset(&at, 0, sizeof at);
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof at;
  CHECK(fd >= 0 && bind(fd, (struct sockaddr*)&at, sizeof at) == 0 &&
        getsockname(fd, (struct sockaddr*)&at, &len) == 0);
  close(fd);
  return ntohs(at.sin_port);
}

/* Starts this program as the second node of a session on `port`, with `per_node` workers on
 * the GPUs from `first_gpu` on. Its workers run this program too. */
static void start_second_node(int port, int32_t per_node, int32_t first_gpu) {
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  CHECK(len > 0);
  self[len > 0 ? len : 0] = 0;
  setenv("DISCOVM_WORKER", self, 1);
  char visible[128] = "", port_text[16], workers_text[16];
  for (int32_t g = first_gpu; g < first_gpu + per_node; g++) {
    size_t used = strlen(visible);
    snprintf(visible + used, sizeof visible - used, "%s%d", g == first_gpu ? "" : ",", (int)g);
  }
  snprintf(port_text, sizeof port_text, "%d", port);
  snprintf(workers_text, sizeof workers_text, "%d", (int)per_node);
  node_pid = fork();
  CHECK(node_pid >= 0);
  if (node_pid == 0) {
    setenv("CUDA_VISIBLE_DEVICES", visible, 1);
    execl(self, self, "node", "127.0.0.1", port_text, workers_text, (char*)NULL);
    _exit(127);
  }
}

/* A session of `n` workers of `kind` on `devices`, with `timeout_ms` (0: none); worker processes
 * run this program. Of "nodes", this machine runs the first half of the workers, a second node
 * the rest. */
static dvm_session* start_session(const char* kind, int32_t n, const DLDevice* devices,
                                  int64_t timeout_ms) {
  dvm_session_options options;
  memset(&options, 0, sizeof options);
  options.num_devices = n;
  options.devices = devices;
  options.timeout_ms = timeout_ms;
  options.worker_program = "/proc/self/exe";
  dvm_session* s = NULL;
  if (strcmp(kind, "nodes") == 0) {
    setenv("DISCOVM_SESSION_TOKEN", "the cuda_nccl test's secret", 1);
    int port = free_port();
    start_second_node(port, n / 2, n / 2);
    CHECK_OK(dvm_session_new_socket(2, n / 2, 1, "127.0.0.1", port, &options, &s));
  } else if (strcmp(kind, "processes") == 0) {
    CHECK_OK(dvm_session_new_process(n, 1, &options, &s));
  } else {
    CHECK_OK(dvm_session_new_threaded(n, 1, &options, &s));
  }
  return s;
}

/* Shuts `s` down and frees it, and waits for its second node, if any. */
static void finish_session(dvm_session* s) {
  CHECK_OK(dvm_session_shutdown(s));
  dvm_session_free(s);
  if (node_pid > 0) {
    int status = 0;
    CHECK(waitpid(node_pid, &status, 0) == node_pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    node_pid = 0;
  }
}

/* init_ccl("nccl") on `s`, a session of `kind` of `program`: 0 when it worked; else, with
 * the session finished, 77 where NCCL cannot be loaded and 1 for another failure, said. */
static int start_nccl(dvm_session* s, const char* program, const char* kind) {
  dvm_status status = dvm_session_init_ccl(s, "nccl", NULL, 0);
  if (status == DVM_OK) return 0;
  if (status == DVM_DEVICE_UNAVAILABLE) {
    printf("%s: skipped: %s\n", program, dvm_last_error_message());
  } else {
    fprintf(stderr, "%s: %s: init_ccl failed: %s\n", program, kind, dvm_last_error_message());
  }
  finish_session(s);
  return status == DVM_DEVICE_UNAVAILABLE ? EXIT_SKIPPED : 1;
}

#endif
