package discovm

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The C API this package was written for, as include/discovm.h declares it: every function
// (with the reason when the package does not call it), the handle types, the options'
// fields (each set in options.go) and the status codes (each in statusKinds). A change to
// the header fails TestHeaderMatchesTheBinding until this, and the package, follow it.
var knownFunctions = []struct{ decl, notCalled string }{
	{"dvm_status dvm_device_count(int32_t device_type, int32_t *out)", ""},
	{"dvm_status dvm_dref_get(const dvm_dref *dref, int32_t worker, DVMAny *out)", ""},
	{"dvm_status dvm_dref_set(const dvm_dref *dref, int32_t worker, const DVMAny *value)", ""},
	{"void dvm_dref_free(dvm_dref *dref)", "Close drops every handle with dvm_object_dec_ref"},
	{"const char *dvm_last_error_kind(void)", ""},
	{"const char *dvm_last_error_message(void)", ""},
	{"void dvm_error_raise(const char *kind, const char *message)", ""},
	{"const char *dvm_version(void)", ""},
	{"dvm_status dvm_func_new(void *self_, int32_t (*call)(void*, const DVMAny*, int32_t, DVMAny*), void (*deleter)(void*), dvm_func **out)", ""},
	{"void dvm_func_free(dvm_func *f)", "Close drops every handle with dvm_object_dec_ref"},
	{"dvm_status dvm_func_call(dvm_func *f, const DVMAny *args, int32_t num_args, DVMAny *result)", ""},
	{"dvm_status dvm_func_register_global(const char *name, dvm_func *f, int32_t allow_override)", ""},
	{"dvm_status dvm_func_get_global(const char *name, dvm_func **out)", ""},
	{"dvm_status dvm_func_list_global_names(DVMAny *out)", ""},
	{"dvm_status dvm_func_remove_global(const char *name)", ""},
	{"dvm_status dvm_func_new_hosted(void *self_, int32_t (*call)(void*, const DVMAny*, int32_t, int32_t, DVMAny*), void (*deleter)(void*), dvm_func **out)", "Go functions run on the worker's own thread, so dvm_func_new serves"},
	{"dvm_status dvm_session_new_socket(int32_t num_nodes, int32_t workers_per_node, int32_t num_groups, const char *host, int32_t port, const dvm_session_options *opts, dvm_session **out)", ""},
	{"int dvm_node_main(int argc, char *const *argv)", "node programs are C programs (discovm-node)"},
	{"dvm_status dvm_session_new_process(int32_t num_workers, int32_t num_groups, const dvm_session_options *opts, dvm_session **out)", ""},
	{"int dvm_worker_main(int argc, char *const *argv)", "worker programs are C programs (discovm-worker)"},
	{"dvm_status dvm_session_new_threaded(int32_t num_workers, int32_t num_groups, const dvm_session_options *opts, dvm_session **out)", ""},
	{"int32_t dvm_session_num_workers(const dvm_session *session)", ""},
	{"dvm_status dvm_session_get_global_func(dvm_session *session, const char *name, dvm_dref **out)", ""},
	{"dvm_status dvm_session_load_module(dvm_session *session, const char *path, dvm_dref **out)", ""},
	{"dvm_status dvm_session_module_func(dvm_session *session, const dvm_dref *module, const char *name, dvm_dref **out)", ""},
	{"dvm_status dvm_session_call(dvm_session *session, const dvm_dref *func, const DVMAny *args, int32_t num_args, dvm_dref **out)", ""},
	{"dvm_status dvm_session_sync_worker(dvm_session *session, int32_t worker)", ""},
	{"dvm_status dvm_session_sync_all(dvm_session *session)", ""},
	{"dvm_status dvm_session_init_ccl(dvm_session *session, const char *backend, const int32_t *device_ids, int32_t n)", ""},
	{"dvm_status dvm_session_copy_to_worker0(dvm_session *session, const DLTensor *host, const dvm_dref *dst)", ""},
	{"dvm_status dvm_session_copy_from_worker0(dvm_session *session, DLTensor *host, const dvm_dref *src)", ""},
	{"dvm_status dvm_session_live_registers(dvm_session *session, int32_t worker, int64_t *out)", ""},
	{"dvm_status dvm_session_shutdown(dvm_session *session)", ""},
	{"void dvm_session_free(dvm_session *session)", "Close drops every handle with dvm_object_dec_ref"},
	{"dvm_status dvm_session_status(dvm_session *session, DVMAny *out)", ""},
	{"dvm_status dvm_session_trace_start(dvm_session *session)", ""},
	{"dvm_status dvm_session_trace_stop(dvm_session *session, const char *path)", ""},
	{"dvm_status dvm_session_trace_dump(dvm_session *session, const char *path)", ""},
	{"dvm_status dvm_stream_new(DLDevice device, dvm_stream **out)", ""},
	{"dvm_status dvm_stream_sync(dvm_stream *s)", ""},
	{"dvm_status dvm_stream_wait(dvm_stream *waiter, dvm_stream *signaler)", ""},
	{"void dvm_stream_free(dvm_stream *s)", "Close drops every handle with dvm_object_dec_ref"},
	{"dvm_status dvm_tensor_empty(const int64_t *shape, int32_t ndim, DLDataType dtype, DLDevice device, dvm_tensor **out)", ""},
	{"void dvm_tensor_free(dvm_tensor *t)", "Close drops every handle with dvm_object_dec_ref"},
	{"const DLTensor *dvm_tensor_dl(const dvm_tensor *t)", ""},
	{"dvm_status dvm_tensor_from_dlpack(DLManagedTensorVersioned *managed, dvm_tensor **out)", "DLPack exchange is for hosts with DLPack producers and consumers"},
	{"dvm_status dvm_tensor_to_dlpack(dvm_tensor *t, DLManagedTensorVersioned **out)", "DLPack exchange is for hosts with DLPack producers and consumers"},
	{"dvm_status dvm_tensor_read(dvm_tensor *t, void *dst, size_t nbytes)", ""},
	{"dvm_status dvm_tensor_write(dvm_tensor *t, const void *src, size_t nbytes)", ""},
	{"dvm_status dvm_tensor_copy(dvm_tensor *dst, dvm_tensor *src, dvm_stream *s)", ""},
	{"dvm_status dvm_object_inc_ref(void *obj)", ""},
	{"dvm_status dvm_object_dec_ref(void *obj)", ""},
	{"dvm_status dvm_any_release(DVMAny *value)", ""},
	{"dvm_status dvm_string_new(const char *data, size_t len, DVMAny *out)", ""},
	{"dvm_status dvm_bytes_new(const void *data, size_t len, DVMAny *out)", ""},
	{"dvm_status dvm_shape_new(const int64_t *dims, int32_t ndim, DVMAny *out)", ""},
	{"dvm_status dvm_session_worker(dvm_session *session, int32_t worker, dvm_worker **out)", ""},
	{"void dvm_worker_free(dvm_worker *worker)", "Close drops every handle with dvm_object_dec_ref"},
	{"dvm_status dvm_worker_call(dvm_worker *worker, const dvm_dref *func, const DVMAny *args, int32_t num_args, dvm_dref **out)", ""},
	{"dvm_status dvm_worker_sync(dvm_worker *worker)", ""},
	{"int32_t dvm_worker_id(const dvm_worker *worker)", ""},
	{"dvm_status dvm_worker_device(const dvm_worker *worker, DLDevice *out)", ""},
	{"int32_t dvm_current_worker_id(void)", ""},
	{"dvm_status dvm_current_worker(dvm_worker **out)", ""},
}

var knownHandles = []string{"dvm_dref", "dvm_func", "dvm_session", "dvm_stream", "dvm_tensor", "dvm_worker"}

var knownOptions = []string{
	"int64_t timeout_ms", "int32_t spin_us", "int32_t num_cpu_affinity",
	"const int32_t *cpu_affinity", "int32_t num_devices", "const DLDevice *devices",
	"const char *worker_program", "const char *session_token", "int64_t heartbeat_ms",
	"int32_t upload_modules", "int32_t local_threads", "int32_t threads_per_worker",
}

// cHeader is what the tests compare: include/discovm.h without comments and preprocessor
// lines, as one line of statements.
type cHeader struct {
	text    string
	defines map[string]int
}

func readHeader(t *testing.T) cHeader {
	raw, err := os.ReadFile(filepath.Join("..", "..", "include", "discovm.h"))
	if err != nil {
		t.Fatal(err)
	}
	text := regexp.MustCompile(`(?s)/\*.*?\*/`).ReplaceAllString(string(raw), "")
	text = regexp.MustCompile(`//[^\n]*`).ReplaceAllString(text, "")
	h := cHeader{defines: map[string]int{}}
	var kept []string
	define := regexp.MustCompile(`^#define (DVM_\w+) (\d+)$`)
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if m := define.FindStringSubmatch(line); m != nil {
			h.defines[m[1]], _ = strconv.Atoi(m[2])
		}
		if !strings.HasPrefix(line, "#") {
			kept = append(kept, line)
		}
	}
	h.text = strings.Join(strings.Fields(strings.ReplaceAll(strings.Join(kept, " "), `extern "C" {`, "")), " ")
	return h
}

// statements are the header's statements (split at ; { and }).
func (h cHeader) statements() []string {
	var out []string
	for _, s := range regexp.MustCompile(`[;{}]`).Split(h.text, -1) {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

var declaration = regexp.MustCompile(`^(.+?)\b(dvm_\w+)\((.*)\)$`)

// signature is a declaration's types alone: no parameter names, spaces only between words.
func signature(decl string) (string, string) {
	m := declaration.FindStringSubmatch(decl)
	if m == nil {
		return "", ""
	}
	var params []string
	depth, start := 0, 0
	list := m[3] + ","
	for i, c := range list {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				params = append(params, paramType(list[start:i]))
				start = i + 1
			}
		}
	}
	return m[2], compact(m[1]) + "(" + strings.Join(params, ",") + ")"
}

func paramType(p string) string {
	p = strings.TrimSpace(p)
	if fp := regexp.MustCompile(`\(\*\s*\w+\)`); fp.MatchString(p) {
		return compact(fp.ReplaceAllString(p, "(*)"))
	}
	if p == "void" {
		return p
	}
	return compact(regexp.MustCompile(`\w+$`).ReplaceAllString(p, ""))
}

func compact(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return regexp.MustCompile(`\s*([*(),])\s*`).ReplaceAllString(s, "$1")
}

// sources is the package's Go and C code, without its tests.
func sources(t *testing.T) string {
	var all strings.Builder
	files, _ := filepath.Glob("*.go")
	c, _ := filepath.Glob("*.c")
	for _, f := range append(files, c...) {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
	}
	return all.String()
}

func TestHeaderMatchesTheBinding(t *testing.T) {
	h := readHeader(t)
	code := sources(t)
	known := map[string]string{}
	for _, k := range knownFunctions {
		name, sig := signature(k.decl)
		known[name] = sig
		called := regexp.MustCompile(`\b(C\.)?` + name + `\(`).MatchString(code)
		if k.notCalled == "" && !called {
			t.Errorf("the package knows %s but never calls it", name)
		}
		if k.notCalled != "" && called {
			t.Errorf("the package calls %s, listed as not called (%s)", name, k.notCalled)
		}
	}
	declared := map[string]bool{}
	var handles []string
	for _, s := range h.statements() {
		if m := regexp.MustCompile(`^typedef struct (dvm_\w+) (dvm_\w+)$`).FindStringSubmatch(s); m != nil {
			handles = append(handles, m[2])
			continue
		}
		if strings.HasPrefix(s, "typedef") {
			continue
		}
		name, sig := signature(s)
		if name == "" {
			continue
		}
		declared[name] = true
		switch want, ok := known[name]; {
		case !ok:
			t.Errorf("include/discovm.h declares %s, which the Go package does not know: %s", name, s)
		case want != sig:
			t.Errorf("include/discovm.h declares %s as %s; the Go package knows it as %s", name, sig, want)
		}
	}
	for name := range known {
		if !declared[name] {
			t.Errorf("the Go package knows %s, which include/discovm.h does not declare", name)
		}
	}
	sort.Strings(handles)
	if strings.Join(handles, " ") != strings.Join(knownHandles, " ") {
		t.Errorf("include/discovm.h declares the handle types %v; the Go package knows %v", handles, knownHandles)
	}
	if !strings.Contains(h.text, "typedef int32_t dvm_status;") {
		t.Error("dvm_status is no longer an int32_t")
	}
	checkOptions(t, h)
	checkStatusCodes(t, h)
}

func checkOptions(t *testing.T, h cHeader) {
	m := regexp.MustCompile(`typedef struct \{ (.*?) \} dvm_session_options;`).FindStringSubmatch(h.text)
	if m == nil {
		t.Fatal("include/discovm.h has no dvm_session_options")
	}
	var fields []string
	for _, f := range strings.Split(m[1], ";") {
		if f = strings.TrimSpace(f); f != "" {
			fields = append(fields, f)
		}
	}
	if strings.Join(fields, "; ") != strings.Join(knownOptions, "; ") {
		t.Errorf("dvm_session_options has the fields\n  %s\nthe Go package knows\n  %s",
			strings.Join(fields, "; "), strings.Join(knownOptions, "; "))
	}
	options, err := os.ReadFile("options.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range knownOptions {
		name := f[strings.LastIndexAny(f, " *")+1:]
		if !strings.Contains(string(options), "c."+name) {
			t.Errorf("options.go does not set dvm_session_options.%s", name)
		}
	}
}

func checkStatusCodes(t *testing.T, h cHeader) {
	for name, code := range h.defines {
		if name == "DVM_OK" || name == "DVM_OTHER_ERROR" {
			if (name == "DVM_OK") != (code == 0) || (name == "DVM_OTHER_ERROR") != (code == 11) {
				t.Errorf("%s is %d", name, code)
			}
			continue
		}
		if _, ok := statusKinds[code]; !ok {
			t.Errorf("include/discovm.h defines %s = %d, a status the Go package has no kind for", name, code)
		}
	}
	if len(h.defines) != len(statusKinds)+2 {
		t.Errorf("include/discovm.h defines %d status codes; the Go package knows %d", len(h.defines), len(statusKinds)+2)
	}
}
