/* kiln's C runtime (see kiln_runtime.h): loads an exported model library with the dynamic
 * loader, reads its execution plan (kiln/runtime/c/plan.py writes it) and runs its kernels.
 *
 * The plan is untrusted input in the sense that a file may be truncated or not kiln's: every
 * count, index, offset and size is checked against what was read before it, so a bad file is
 * KILN_ERR_FORMAT, never a read outside the library's bytes. The kernels themselves are native
 * code and are trusted as much as any library one loads.
 */
#define _GNU_SOURCE
#include "kiln_runtime.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PLAN_MAGIC "KILNPLAN"
#define PLAN_VERSION 1
#define PLACE_ARENA 0
#define PLACE_CONSTANT 1
#define SYMBOL_PREFIX "kfn_" /* kiln/runtime/load.py: a kernel's native symbol */
#define ARENA_ALIGN 64
#define MAX_NDIM 32

/* The generated code's calling convention (kiln/runtime/function_info.py). */
typedef union {
  int64_t v_int64;
  double v_float64;
  void* v_handle;
} KilnValue;
typedef int32_t (*kiln_kernel)(KilnValue* args, int32_t num_args);

typedef struct {
  uint32_t place;
  uint64_t offset, nbytes;
  char* dtype;
  int32_t ndim;
  int64_t* shape;
} Entry;

typedef struct {
  char* symbol;
  kiln_kernel fn;
  uint32_t num_args;
  KilnValue* args;
  uint32_t num_messages;
  char** messages;
} Kernel;

typedef struct {
  char* name;
  uint32_t entry;
  int set;
} Input;

struct KilnModel {
  void* library;
  const uint8_t* blob;
  uint64_t blob_size;
  uint64_t arena_bytes;
  uint8_t* arena;
  uint32_t num_entries, num_inputs, num_outputs, num_kernels;
  Entry* entries;
  Input* inputs;
  uint32_t* outputs;
  char** output_names;
  Kernel* kernels;
  int ran;
};

/* ------------------------------------------------------------------------------- errors */
static __thread char last_error[1024];

const char* kiln_last_error(void) { return last_error; }

static int fail(int status, const char* format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(last_error, sizeof last_error, format, args);
  va_end(args);
  return status;
}

/* -------------------------------------------------------------------------- plan reading */
typedef struct {
  const uint8_t* at;
  uint64_t left;
  int bad; /* set by the first read past the end; later reads return zeros */
  int oom; /* a string could not be allocated */
} Reader;

static int take(Reader* r, void* out, uint64_t n) {
  if (r->bad || n > r->left) {
    r->bad = 1;
    memset(out, 0, n);
    return 0;
  }
  memcpy(out, r->at, n); /* the plan's bytes may be unaligned */
  r->at += n;
  r->left -= n;
  return 1;
}

/* Little-endian fields: kiln targets little-endian machines only (x86-64, AArch64). */
static uint32_t u32(Reader* r) {
  uint32_t v;
  take(r, &v, 4);
  return v;
}

static uint64_t u64(Reader* r) {
  uint64_t v;
  take(r, &v, 8);
  return v;
}

static char* str(Reader* r) {
  uint32_t n = u32(r);
  if (r->bad || n > r->left) {
    r->bad = 1;
    return NULL;
  }
  char* s = malloc((size_t)n + 1);
  if (s == NULL) {
    r->oom = r->bad = 1;
    return NULL;
  }
  take(r, s, n);
  s[n] = 0;
  return s;
}

static uint64_t dtype_size(const char* dtype) {
  static const struct {
    const char* name;
    uint64_t size;
  } sizes[] = {{"float32", 4}, {"float64", 8}, {"float16", 2}, {"bfloat16", 2}, {"int8", 1},
               {"uint8", 1},   {"int16", 2},   {"uint16", 2},  {"int32", 4},    {"uint32", 4},
               {"int64", 8},   {"uint64", 8},  {"bool", 1}};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; ++k)
    if (strcmp(dtype, sizes[k].name) == 0) return sizes[k].size;
  return 0;
}

/* A read failed: out of memory, else a corrupt plan (what it was reading: `what`). */
#define CORRUPT(...) (r->oom ? fail(KILN_ERR_MEMORY, "out of memory reading %s", path) \
                             : fail(KILN_ERR_FORMAT, __VA_ARGS__))
/* Sizes past this are corrupt, not large: no machine kiln targets addresses 2^48 bytes. */
#define MAX_BYTES ((uint64_t)1 << 48)

static int read_entry(Reader* r, Entry* e, const KilnModel* m, uint32_t k, const char* path) {
  e->place = u32(r);
  e->offset = u64(r);
  e->nbytes = u64(r);
  e->dtype = str(r);
  uint32_t ndim = u32(r);
  if (r->bad || e->dtype == NULL || ndim > MAX_NDIM)
    return CORRUPT("%s: corrupt execution plan (entry %u)", path, k);
  e->ndim = (int32_t)ndim;
  e->shape = calloc(ndim ? ndim : 1, sizeof(int64_t));
  if (e->shape == NULL) return fail(KILN_ERR_MEMORY, "out of memory reading %s", path);
  uint64_t count = 1, bytes = 0;
  for (uint32_t d = 0; d < ndim; ++d) {
    e->shape[d] = (int64_t)u64(r);
    if (e->shape[d] < 0 || __builtin_mul_overflow(count, (uint64_t)e->shape[d], &count))
      return CORRUPT("%s: corrupt execution plan (entry %u shape)", path, k);
  }
  uint64_t size = dtype_size(e->dtype);
  if (size == 0)
    return fail(KILN_ERR_FORMAT, "%s: entry %u has dtype %s, which this runtime does not know",
                path, k, e->dtype);
  if (r->bad || __builtin_mul_overflow(count, size, &bytes) || bytes != e->nbytes)
    return CORRUPT("%s: corrupt execution plan (entry %u size)", path, k);
  if (e->place != PLACE_ARENA && e->place != PLACE_CONSTANT)
    return CORRUPT("%s: corrupt execution plan (entry %u place %u)", path, k, e->place);
  uint64_t limit = e->place == PLACE_ARENA ? m->arena_bytes : m->blob_size;
  if (e->offset > limit || e->nbytes > limit - e->offset)
    return CORRUPT("%s: corrupt execution plan (entry %u lies outside its %s)", path, k,
                   e->place == PLACE_CONSTANT ? "constants" : "arena");
  return KILN_OK;
}

static void* entry_data(const KilnModel* m, uint32_t k) {
  const Entry* e = &m->entries[k];
  return e->place == PLACE_CONSTANT ? (void*)(m->blob + e->offset) : m->arena + e->offset;
}

static int read_plan(KilnModel* m, const uint8_t* plan, uint64_t plan_size, const char* path) {
  Dl_info library;      /* where the model's own symbols live (its blob is one of them) */
  if (dladdr((const void*)m->blob, &library) == 0)
    return fail(KILN_ERR_FORMAT, "%s: cannot tell where the library is mapped", path);
  const void* base = library.dli_fbase;
  Reader reader = {plan, plan_size, 0, 0}, *r = &reader;
  char magic[8];
  take(r, magic, 8);
  if (r->bad || memcmp(magic, PLAN_MAGIC, 8) != 0)
    return CORRUPT("%s: corrupt execution plan (no plan header)", path);
  uint32_t version = u32(r);
  if (version != PLAN_VERSION)
    return fail(KILN_ERR_FORMAT, "%s: execution plan version %u; this runtime reads version %d",
                path, version, PLAN_VERSION);
  m->num_entries = u32(r);
  m->num_inputs = u32(r);
  m->num_outputs = u32(r);
  m->num_kernels = u32(r);
  m->arena_bytes = u64(r);
  /* Each record takes at least 4 bytes of plan: counts above that are corrupt, not huge. */
  if (r->bad || m->num_entries > plan_size / 4 || m->num_inputs > plan_size / 4 ||
      m->num_outputs > plan_size / 4 || m->num_kernels > plan_size / 4 ||
      m->arena_bytes > MAX_BYTES)
    return CORRUPT("%s: corrupt execution plan (counts)", path);
  m->entries = calloc(m->num_entries + 1, sizeof(Entry));
  m->inputs = calloc(m->num_inputs + 1, sizeof(Input));
  m->outputs = calloc(m->num_outputs + 1, sizeof(uint32_t));
  m->output_names = calloc(m->num_outputs + 1, sizeof(char*));
  m->kernels = calloc(m->num_kernels + 1, sizeof(Kernel));
  if (!m->entries || !m->inputs || !m->outputs || !m->output_names || !m->kernels)
    return fail(KILN_ERR_MEMORY, "out of memory reading %s", path);
  for (uint32_t k = 0; k < m->num_entries; ++k) {
    int status = read_entry(r, &m->entries[k], m, k, path);
    if (status != KILN_OK) return status;
  }
  for (uint32_t k = 0; k < m->num_inputs; ++k) {
    m->inputs[k].name = str(r);
    m->inputs[k].entry = u32(r);
    if (r->bad || m->inputs[k].name == NULL || m->inputs[k].entry >= m->num_entries ||
        m->entries[m->inputs[k].entry].place != PLACE_ARENA)   /* constants are read-only */
      return CORRUPT("%s: corrupt execution plan (input %u)", path, k);
  }
  for (uint32_t k = 0; k < m->num_outputs; ++k) {
    m->outputs[k] = u32(r);
    m->output_names[k] = malloc(24);
    if (m->output_names[k] == NULL) return fail(KILN_ERR_MEMORY, "out of memory reading %s", path);
    snprintf(m->output_names[k], 24, "output%u", k);
    if (r->bad || m->outputs[k] >= m->num_entries)
      return CORRUPT("%s: corrupt execution plan (output %u)", path, k);
  }
  for (uint32_t k = 0; k < m->num_kernels; ++k) {
    Kernel* kern = &m->kernels[k];
    kern->symbol = str(r);
    uint32_t num_inputs = u32(r), num_outputs = u32(r);
    kern->num_args = num_inputs + num_outputs;
    if (r->bad || kern->symbol == NULL || num_inputs > r->left / 4 ||
        num_outputs > r->left / 4 || kern->num_args > r->left / 4 ||
        strncmp(kern->symbol, SYMBOL_PREFIX, strlen(SYMBOL_PREFIX)) != 0)
      return CORRUPT("%s: corrupt execution plan (kernel %u)", path, k);
    kern->args = calloc(kern->num_args + 1, sizeof(KilnValue));
    if (kern->args == NULL) return fail(KILN_ERR_MEMORY, "out of memory reading %s", path);
    for (uint32_t a = 0; a < kern->num_args; ++a) {
      uint32_t entry = u32(r);
      /* kernels write their outputs: never into the library's read-only constants */
      if (r->bad || entry >= m->num_entries ||
          (a >= num_inputs && m->entries[entry].place != PLACE_ARENA))
        return CORRUPT("%s: corrupt execution plan (kernel %u argument %u)", path, k, a);
      kern->args[a].v_handle = NULL;
      kern->args[a].v_int64 = (int64_t)entry; /* resolved to an address once the arena exists */
    }
    kern->num_messages = u32(r);
    if (r->bad || kern->num_messages > r->left / 4)
      return CORRUPT("%s: corrupt execution plan (kernel %u messages)", path, k);
    kern->messages = calloc(kern->num_messages + 1, sizeof(char*));
    if (kern->messages == NULL) return fail(KILN_ERR_MEMORY, "out of memory reading %s", path);
    for (uint32_t s = 0; s < kern->num_messages; ++s)
      if ((kern->messages[s] = str(r)) == NULL)
        return CORRUPT("%s: corrupt execution plan (kernel %u message %u)", path, k, s);
    dlerror();
    kern->fn = (kiln_kernel)dlsym(m->library, kern->symbol);
    /* dlsym searches the library's dependencies too: the kernel must be the model's own. */
    Dl_info where;
    if (kern->fn == NULL || dladdr((void*)kern->fn, &where) == 0 || where.dli_fbase != base)
      return fail(KILN_ERR_FORMAT, "%s: kernel %s is missing from the library", path,
                  kern->symbol);
  }
  if (r->left != 0) return CORRUPT("%s: corrupt execution plan (%llu bytes left over)", path,
                                  (unsigned long long)r->left);
  return KILN_OK;
}

/* ------------------------------------------------------------------------------ loading */
static const void* symbol(void* library, const char* name) {
  dlerror();
  return dlsym(library, name);
}

int kiln_model_load(const char* path, KilnModel** out) {
  if (out == NULL) return fail(KILN_ERR_ARGUMENT, "kiln_model_load: out is NULL");
  *out = NULL;
  if (path == NULL) return fail(KILN_ERR_ARGUMENT, "kiln_model_load: path is NULL");
  KilnModel* m = calloc(1, sizeof *m);
  if (m == NULL) return fail(KILN_ERR_MEMORY, "out of memory loading %s", path);
  /* A path without a slash would be searched for along LD_LIBRARY_PATH: load the file named. */
  char local[4096];
  const char* name = path;
  if (strchr(path, '/') == NULL) {
    snprintf(local, sizeof local, "./%s", path);
    name = local;
  }
  m->library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (m->library == NULL) {
    int status = fail(KILN_ERR_LOAD, "%s: cannot load the model library (%s)", path, dlerror());
    kiln_model_free(m);
    return status;
  }
  const uint8_t* blob = symbol(m->library, "kiln_model_blob");
  const int64_t* blob_size = symbol(m->library, "kiln_model_blob_size");
  const uint8_t* plan = symbol(m->library, "kiln_model_plan");
  const int64_t* plan_size = symbol(m->library, "kiln_model_plan_size");
  int status;
  if (blob == NULL || blob_size == NULL || *blob_size < 0) {
    status = fail(KILN_ERR_FORMAT, "%s: not a kiln model library (no kiln_model_blob)", path);
  } else if (plan == NULL || plan_size == NULL || *plan_size < 0) {
    status = fail(KILN_ERR_FORMAT,
                  "%s: the library has no execution plan for the C runtime: it was exported by "
                  "an older kiln, or the model has GPU or external (BYOC) kernels, which only "
                  "kiln's Python runtime runs", path);
  } else {
    m->blob = blob;
    m->blob_size = (uint64_t)*blob_size;
    status = read_plan(m, plan, (uint64_t)*plan_size, path);
  }
  if (status == KILN_OK) {
    size_t bytes = (size_t)((m->arena_bytes + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN);
    void* arena = NULL;
    if (posix_memalign(&arena, ARENA_ALIGN, bytes ? bytes : ARENA_ALIGN) != 0)
      status = fail(KILN_ERR_MEMORY, "%s: cannot allocate the model's %llu bytes of buffers",
                    path, (unsigned long long)m->arena_bytes);
    m->arena = arena;
  }
  if (status != KILN_OK) {
    kiln_model_free(m);
    return status;
  }
  for (uint32_t k = 0; k < m->num_kernels; ++k) {
    Kernel* kern = &m->kernels[k];
    for (uint32_t a = 0; a < kern->num_args; ++a)
      kern->args[a].v_handle = entry_data(m, (uint32_t)kern->args[a].v_int64);
  }
  *out = m;
  last_error[0] = 0;
  return KILN_OK;
}

void kiln_model_free(KilnModel* m) {
  if (m == NULL) return;
  for (uint32_t k = 0; m->entries && k < m->num_entries; ++k) {
    free(m->entries[k].dtype);
    free(m->entries[k].shape);
  }
  for (uint32_t k = 0; m->inputs && k < m->num_inputs; ++k) free(m->inputs[k].name);
  for (uint32_t k = 0; m->output_names && k < m->num_outputs; ++k) free(m->output_names[k]);
  for (uint32_t k = 0; m->kernels && k < m->num_kernels; ++k) {
    free(m->kernels[k].symbol);
    free(m->kernels[k].args);
    for (uint32_t s = 0; m->kernels[k].messages && s < m->kernels[k].num_messages; ++s)
      free(m->kernels[k].messages[s]);
    free(m->kernels[k].messages);
  }
  free(m->entries);
  free(m->inputs);
  free(m->outputs);
  free(m->output_names);
  free(m->kernels);
  free(m->arena);
  if (m->library != NULL) dlclose(m->library);
  free(m);
}

/* ---------------------------------------------------------------------- inputs, outputs */
int kiln_model_num_inputs(const KilnModel* m) { return m ? (int)m->num_inputs : 0; }

int kiln_model_num_outputs(const KilnModel* m) { return m ? (int)m->num_outputs : 0; }

static void describe(const KilnModel* m, uint32_t entry, const char* name, KilnTensorInfo* info) {
  const Entry* e = &m->entries[entry];
  info->name = name;
  info->dtype = e->dtype;
  info->ndim = e->ndim;
  info->shape = e->shape;
  info->nbytes = (size_t)e->nbytes;
}

int kiln_model_input_info(const KilnModel* m, int index, KilnTensorInfo* info) {
  if (m == NULL || info == NULL) return fail(KILN_ERR_ARGUMENT, "kiln_model_input_info: NULL");
  if (index < 0 || (uint32_t)index >= m->num_inputs)
    return fail(KILN_ERR_ARGUMENT, "input index %d is out of range: the model has %u inputs",
                index, m->num_inputs);
  describe(m, m->inputs[index].entry, m->inputs[index].name, info);
  return KILN_OK;
}

int kiln_model_output_info(const KilnModel* m, int index, KilnTensorInfo* info) {
  if (m == NULL || info == NULL) return fail(KILN_ERR_ARGUMENT, "kiln_model_output_info: NULL");
  if (index < 0 || (uint32_t)index >= m->num_outputs)
    return fail(KILN_ERR_ARGUMENT, "output index %d is out of range: the model has %u outputs",
                index, m->num_outputs);
  describe(m, m->outputs[index], m->output_names[index], info);
  return KILN_OK;
}

static void input_names(const KilnModel* m, char* out, size_t size) {
  size_t used = 0;
  out[0] = 0;
  for (uint32_t k = 0; k < m->num_inputs && used + 1 < size; ++k) {
    int n = snprintf(out + used, size - used, "%s%s", k ? ", " : "", m->inputs[k].name);
    if (n < 0) break;
    used += (size_t)n;
  }
}

int kiln_set_input(KilnModel* m, const char* name, const void* data, size_t nbytes) {
  if (m == NULL || name == NULL || data == NULL)
    return fail(KILN_ERR_ARGUMENT, "kiln_set_input: model, name and data must not be NULL");
  for (uint32_t k = 0; k < m->num_inputs; ++k) {
    if (strcmp(m->inputs[k].name, name) != 0) continue;
    const Entry* e = &m->entries[m->inputs[k].entry];
    if (nbytes != e->nbytes)
      return fail(KILN_ERR_ARGUMENT, "input '%s' takes %llu bytes (%s, %d dimensions), got %zu",
                  name, (unsigned long long)e->nbytes, e->dtype, e->ndim, nbytes);
    memcpy(entry_data(m, m->inputs[k].entry), data, nbytes);
    m->inputs[k].set = 1;
    return KILN_OK;
  }
  char names[512];
  input_names(m, names, sizeof names);
  return fail(KILN_ERR_ARGUMENT, "the model has no input named '%s'; its inputs are: %s", name,
              names);
}

int kiln_run(KilnModel* m) {
  if (m == NULL) return fail(KILN_ERR_ARGUMENT, "kiln_run: model is NULL");
  for (uint32_t k = 0; k < m->num_inputs; ++k)
    if (!m->inputs[k].set)
      return fail(KILN_ERR_STATE, "input '%s' is not set (kiln_set_input)", m->inputs[k].name);
  for (uint32_t k = 0; k < m->num_kernels; ++k) {
    Kernel* kern = &m->kernels[k];
    int32_t status = kern->fn(kern->args, (int32_t)kern->num_args);
    if (status != 0) {
      m->ran = 0;
      if (status > 0 && (uint32_t)status <= kern->num_messages)
        return fail(KILN_ERR_KERNEL, "kernel call %u (%s) failed: %s", k, kern->symbol,
                    kern->messages[status - 1]);
      return fail(KILN_ERR_KERNEL, "kernel call %u (%s) failed with status %d", k, kern->symbol,
                  (int)status);
    }
  }
  m->ran = 1;
  return KILN_OK;
}

int kiln_get_output(const KilnModel* m, int index, void* data, size_t nbytes) {
  if (m == NULL || data == NULL)
    return fail(KILN_ERR_ARGUMENT, "kiln_get_output: model and data must not be NULL");
  if (index < 0 || (uint32_t)index >= m->num_outputs)
    return fail(KILN_ERR_ARGUMENT, "output index %d is out of range: the model has %u outputs",
                index, m->num_outputs);
  const Entry* e = &m->entries[m->outputs[index]];
  if (nbytes != e->nbytes)
    return fail(KILN_ERR_ARGUMENT, "output %d has %llu bytes (%s, %d dimensions), got %zu",
                index, (unsigned long long)e->nbytes, e->dtype, e->ndim, nbytes);
  if (!m->ran) return fail(KILN_ERR_STATE, "output %d is read before a successful kiln_run", index);
  memcpy(data, entry_data(m, m->outputs[index]), nbytes);
  return KILN_OK;
}
