// The C API as include/discovm.h declares it, loaded with koffi. The declarations are the
// header's own text (test/header.test.js compares them with the header), turned into koffi
// prototypes by a few rewrites: function-pointer parameters become named callback types, and
// handle outputs are marked `_Out_`.

import koffi from 'koffi';

/** Every function of the header, spelled as the header spells it. */
export const DECLARATIONS = [
  'dvm_status dvm_device_count(int32_t device_type, int32_t *out)',
  'dvm_status dvm_dref_get(const dvm_dref *dref, int32_t worker, DVMAny *out)',
  'dvm_status dvm_dref_set(const dvm_dref *dref, int32_t worker, const DVMAny *value)',
  'void dvm_dref_free(dvm_dref *dref)',
  'const char *dvm_last_error_kind(void)',
  'const char *dvm_last_error_message(void)',
  'void dvm_error_raise(const char *kind, const char *message)',
  'const char *dvm_version(void)',
  'dvm_status dvm_func_new(void *self_, int32_t (*call)(void*, const DVMAny*, int32_t, DVMAny*), void (*deleter)(void*), dvm_func **out)',
  'void dvm_func_free(dvm_func *f)',
  'dvm_status dvm_func_call(dvm_func *f, const DVMAny *args, int32_t num_args, DVMAny *result)',
  'dvm_status dvm_func_register_global(const char *name, dvm_func *f, int32_t allow_override)',
  'dvm_status dvm_func_get_global(const char *name, dvm_func **out)',
  'dvm_status dvm_func_list_global_names(DVMAny *out)',
  'dvm_status dvm_func_remove_global(const char *name)',
  'dvm_status dvm_func_new_hosted(void *self_, int32_t (*call)(void*, const DVMAny*, int32_t, int32_t, DVMAny*), void (*deleter)(void*), dvm_func **out)',
  'dvm_status dvm_session_new_socket(int32_t num_nodes, int32_t workers_per_node, int32_t num_groups, const char *host, int32_t port, const dvm_session_options *opts, dvm_session **out)',
  'int dvm_node_main(int argc, char *const *argv)',
  'dvm_status dvm_session_new_process(int32_t num_workers, int32_t num_groups, const dvm_session_options *opts, dvm_session **out)',
  'int dvm_worker_main(int argc, char *const *argv)',
  'dvm_status dvm_session_new_threaded(int32_t num_workers, int32_t num_groups, const dvm_session_options *opts, dvm_session **out)',
  'int32_t dvm_session_num_workers(const dvm_session *session)',
  'dvm_status dvm_session_get_global_func(dvm_session *session, const char *name, dvm_dref **out)',
  'dvm_status dvm_session_load_module(dvm_session *session, const char *path, dvm_dref **out)',
  'dvm_status dvm_session_module_func(dvm_session *session, const dvm_dref *module, const char *name, dvm_dref **out)',
  'dvm_status dvm_session_call(dvm_session *session, const dvm_dref *func, const DVMAny *args, int32_t num_args, dvm_dref **out)',
  'dvm_status dvm_session_sync_worker(dvm_session *session, int32_t worker)',
  'dvm_status dvm_session_sync_all(dvm_session *session)',
  'dvm_status dvm_session_init_ccl(dvm_session *session, const char *backend, const int32_t *device_ids, int32_t n)',
  'dvm_status dvm_session_copy_to_worker0(dvm_session *session, const DLTensor *host, const dvm_dref *dst)',
  'dvm_status dvm_session_copy_from_worker0(dvm_session *session, DLTensor *host, const dvm_dref *src)',
  'dvm_status dvm_session_live_registers(dvm_session *session, int32_t worker, int64_t *out)',
  'dvm_status dvm_session_shutdown(dvm_session *session)',
  'void dvm_session_free(dvm_session *session)',
  'dvm_status dvm_session_status(dvm_session *session, DVMAny *out)',
  'dvm_status dvm_session_trace_start(dvm_session *session)',
  'dvm_status dvm_session_trace_stop(dvm_session *session, const char *path)',
  'dvm_status dvm_session_trace_dump(dvm_session *session, const char *path)',
  'dvm_status dvm_stream_new(DLDevice device, dvm_stream **out)',
  'dvm_status dvm_stream_sync(dvm_stream *s)',
  'dvm_status dvm_stream_wait(dvm_stream *waiter, dvm_stream *signaler)',
  'void dvm_stream_free(dvm_stream *s)',
  'dvm_status dvm_tensor_empty(const int64_t *shape, int32_t ndim, DLDataType dtype, DLDevice device, dvm_tensor **out)',
  'void dvm_tensor_free(dvm_tensor *t)',
  'const DLTensor *dvm_tensor_dl(const dvm_tensor *t)',
  'dvm_status dvm_tensor_from_dlpack(DLManagedTensorVersioned *managed, dvm_tensor **out)',
  'dvm_status dvm_tensor_to_dlpack(dvm_tensor *t, DLManagedTensorVersioned **out)',
  'dvm_status dvm_tensor_read(dvm_tensor *t, void *dst, size_t nbytes)',
  'dvm_status dvm_tensor_write(dvm_tensor *t, const void *src, size_t nbytes)',
  'dvm_status dvm_tensor_copy(dvm_tensor *dst, dvm_tensor *src, dvm_stream *s)',
  'dvm_status dvm_object_inc_ref(void *obj)',
  'dvm_status dvm_object_dec_ref(void *obj)',
  'dvm_status dvm_any_release(DVMAny *value)',
  'dvm_status dvm_string_new(const char *data, size_t len, DVMAny *out)',
  'dvm_status dvm_bytes_new(const void *data, size_t len, DVMAny *out)',
  'dvm_status dvm_shape_new(const int64_t *dims, int32_t ndim, DVMAny *out)',
  'dvm_status dvm_session_worker(dvm_session *session, int32_t worker, dvm_worker **out)',
  'void dvm_worker_free(dvm_worker *worker)',
  'dvm_status dvm_worker_call(dvm_worker *worker, const dvm_dref *func, const DVMAny *args, int32_t num_args, dvm_dref **out)',
  'dvm_status dvm_worker_sync(dvm_worker *worker)',
  'int32_t dvm_worker_id(const dvm_worker *worker)',
  'dvm_status dvm_worker_device(const dvm_worker *worker, DLDevice *out)',
  'int32_t dvm_current_worker_id(void)',
  'dvm_status dvm_current_worker(dvm_worker **out)',
];

/** The functions the package does not call, and why. */
export const NOT_CALLED = {
  dvm_dref_free: 'close() drops every handle with dvm_object_dec_ref',
  dvm_func_free: 'close() drops every handle with dvm_object_dec_ref',
  dvm_session_free: 'close() drops every handle with dvm_object_dec_ref',
  dvm_stream_free: 'close() drops every handle with dvm_object_dec_ref',
  dvm_tensor_free: 'close() drops every handle with dvm_object_dec_ref',
  dvm_worker_free: 'close() drops every handle with dvm_object_dec_ref',
  dvm_error_raise: 'JS functions run on the JS thread, not the caller\'s: they report errors through dvm_func_new_hosted',
  dvm_func_new: 'JS functions are hosted functions (dvm_func_new_hosted)',
  dvm_current_worker: 'JS functions run on the JS thread: currentWorkerId() comes from the hosted call',
  dvm_tensor_from_dlpack: 'DLPack exchange is for hosts with DLPack producers and consumers',
  dvm_tensor_to_dlpack: 'DLPack exchange is for hosts with DLPack producers and consumers',
  dvm_node_main: 'node programs are C programs (discovm-node)',
  dvm_worker_main: 'worker programs are C programs (discovm-worker)',
};

/** The fields of dvm_session_options, in order, as the header spells them. */
export const OPTION_FIELDS = [
  'int64_t timeout_ms', 'int32_t spin_us', 'int32_t num_cpu_affinity',
  'const int32_t *cpu_affinity', 'int32_t num_devices', 'const DLDevice *devices',
  'const char *worker_program', 'const char *session_token', 'int64_t heartbeat_ms',
  'int32_t upload_modules', 'int32_t local_threads', 'int32_t threads_per_worker',
];

/** The handle types of the header. */
export const HANDLES = ['dvm_dref', 'dvm_func', 'dvm_session', 'dvm_stream', 'dvm_tensor', 'dvm_worker'];

/** The status codes (DVM_*), with the kind each reports. */
export const STATUS_KINDS = {
  1: 'ValueError', 2: 'TypeError', 3: 'IndexError', 4: 'KeyError', 5: 'RuntimeError',
  6: 'WorkerError', 7: 'SessionClosed', 8: 'DeviceUnavailable', 9: 'TimeoutError', 10: 'Panic',
};
export const STATUS_OK = 0;
export const STATUS_OTHER = 11;

/** The path of the library: $DISCOVM_LIBRARY, else libdiscovm.so from the loader's path. */
export const LIBRARY = process.env.DISCOVM_LIBRARY || 'libdiscovm.so';

for (const name of HANDLES) koffi.opaque(name);
koffi.alias('dvm_status', 'int32_t');
koffi.struct('DVMAny', { type_index: 'int32_t', small_str_len: 'uint32_t', v_int64: 'int64_t' });
koffi.struct('DLDevice', { device_type: 'int32_t', device_id: 'int32_t' });
koffi.struct('DLDataType', { code: 'uint8_t', bits: 'uint8_t', lanes: 'uint16_t' });
koffi.opaque('DLTensor');
koffi.opaque('DLManagedTensorVersioned');
koffi.struct('dvm_session_options', Object.fromEntries(OPTION_FIELDS.map((f) => {
  const name = f.slice(f.search(/\w+$/));
  return [name, f.slice(0, -name.length).replace('const ', '').trim()];
})));
koffi.proto('int32_t DVMSafeCall(void *self, const DVMAny *args, int32_t num_args, DVMAny *result)');
koffi.proto('int32_t DVMHostedCall(void *self, const DVMAny *args, int32_t num_args, int32_t worker_id, DVMAny *result)');
koffi.proto('void DVMDeleter(void *self)');

/** The koffi prototype of a header declaration. */
export function prototype(decl) {
  return decl
    .replace(/int32_t \(\*(\w+)\)\(void\*, const DVMAny\*, int32_t, DVMAny\*\)/, 'DVMSafeCall *$1')
    .replace(/int32_t \(\*(\w+)\)\(void\*, const DVMAny\*, int32_t, int32_t, DVMAny\*\)/, 'DVMHostedCall *$1')
    .replace(/void \(\*(\w+)\)\(void\*\)/, 'DVMDeleter *$1')
    .replace(/(dvm_\w+|DLManagedTensorVersioned) \*\*out/, '_Out_ $1 **out');
}

const library = koffi.load(LIBRARY);

/** The C functions the package calls, by name. */
export const C = {};
for (const decl of DECLARATIONS) {
  const name = decl.match(/\b(dvm_\w+)\(/)[1];
  if (!(name in NOT_CALLED)) C[name] = library.func(prototype(decl));
}

export { koffi };
