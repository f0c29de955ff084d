/*
 * trace.c: take a timeline of a session, and read its flight recorder.
 *
 * dvm_session_trace_start begins keeping every worker's calls, syncs and collectives and the
 * controller's sends, syncs and copies; dvm_session_trace_stop writes them to a file in the
 * Chrome Trace Event Format, which ui.perfetto.dev and chrome://tracing open: a track per worker
 * and one for the controller, and arrows from each call's send to each worker's run of it. The
 * flight recorder keeps every worker's last 1024 events at all times: dvm_session_trace_dump
 * writes them with no trace running, as a hang report suggests. docs/observability.md says
 * what the timeline shows.
 *
 * Build and run from the repository root:
 *
 *   cargo build
 *   cc -std=c11 -Iinclude examples-c/trace.c -Ltarget/debug -ldiscovm \
 *      -Wl,-rpath,"$PWD/target/debug" -o trace
 *   ./trace            # writes trace.json and dump.json here
 */
#include <stdio.h>
#include <string.h>

#include "discovm.h"
#include "example_check.h" /* CHECK(call): stops with the error if a call fails */

enum { NUM_WORKERS = 2, CALLS = 5 };

/* How many times `text` occurs in the file `path` (its first MiB); -1 when it cannot be read. */
static int occurrences(const char* path, const char* text) {
  FILE* file = fopen(path, "r");
  if (file == NULL) return -1;
  static char buffer[1 << 20];
  size_t n = fread(buffer, 1, sizeof buffer - 1, file);
  fclose(file);
  buffer[n] = '\0';
  int found = 0;
  for (const char* at = buffer; (at = strstr(at, text)) != NULL; at += strlen(text)) found++;
  return found;
}

int main(void) {
  /* Step 1: start worker threads and look a function up (a lookup is no call). */
  dvm_session* session;
  CHECK(dvm_session_new_threaded(NUM_WORKERS, 1, NULL, &session));
  dvm_dref* rank;
  CHECK(dvm_session_get_global_func(session, "runtime.disco.worker_rank", &rank));

  /* Step 2: trace a few calls and a sync. Every worker records its calls in a ring of its own
   * at all times; the trace collects them, with what the controller does. */
  CHECK(dvm_session_trace_start(session));
  for (int i = 0; i < CALLS; i++) {
    dvm_dref* result;
    CHECK(dvm_session_call(session, rank, NULL, 0, &result));
    dvm_dref_free(result);
  }
  CHECK(dvm_session_sync_all(session));
  CHECK(dvm_session_trace_stop(session, "trace.json"));

  /* Step 3: the flight recorder, with no trace running: the workers' last events. */
  CHECK(dvm_session_trace_dump(session, "dump.json"));

  /* Step 4: each worker ran each call: CALLS x NUM_WORKERS complete events of the function,
   * and a flow from each send to each run. */
  int runs = occurrences("trace.json", "\"name\":\"runtime.disco.worker_rank\"");
  int flows = occurrences("trace.json", "\"ph\":\"s\"");
  printf("trace.json: %d runs of the calls, %d flows from their sends\n", runs, flows);
  printf("dump.json: %d runs of the calls\n",
         occurrences("dump.json", "\"name\":\"runtime.disco.worker_rank\""));

  /* Step 5: clean up. */
  dvm_dref_free(rank);
  CHECK(dvm_session_shutdown(session));
  dvm_session_free(session);
  printf("session shut down\n");
  return runs == CALLS * NUM_WORKERS && flows == CALLS * NUM_WORKERS ? 0 : 1;
}
