/* kiln's C runtime: run a model library exported by kiln (CompiledModel.export_library) from a
 * C program, without Python.
 *
 *   KilnModel* m;
 *   if (kiln_model_load("model.so", &m) != KILN_OK) { puts(kiln_last_error()); return 1; }
 *   kiln_set_input(m, "data", x, sizeof x);
 *   kiln_run(m);
 *   kiln_get_output(m, 0, y, sizeof y);
 *   kiln_model_free(m);
 *
 * Every function returns KILN_OK (0) or an error code; kiln_last_error() then says what went
 * wrong, in words (per thread). A model is used by one thread at a time; load it once per
 * thread to run it from several. Its kernels run on kiln's thread pool (OpenMP): set its size
 * with kiln_set_num_threads (default: OpenMP's, OMP_NUM_THREADS or the core count).
 *
 * Link with -lkiln_runtime (`kiln c-runtime -o DIR` builds it, for any --target) and -ldl.
 */
#ifndef KILN_RUNTIME_H_
#define KILN_RUNTIME_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_RUNTIME_VERSION 1

typedef enum {
  KILN_OK = 0,
  KILN_ERR_LOAD = 1,     /* the file is missing or the dynamic loader refused it */
  KILN_ERR_FORMAT = 2,   /* not a kiln model library, or one this runtime cannot run */
  KILN_ERR_ARGUMENT = 3, /* a wrong input name, output index, size or a NULL pointer */
  KILN_ERR_MEMORY = 4,   /* out of memory */
  KILN_ERR_KERNEL = 5,   /* a kernel failed one of its checks (the message says which) */
  KILN_ERR_STATE = 6     /* a call out of order: an input not set before kiln_run, an output
                            read before any run */
} KilnStatus;

typedef struct KilnModel KilnModel;

/* An input or output: its name ("output0", ... for outputs), element type as numpy names it
 * ("float32", "int64", ...), shape and size in bytes. The strings and the shape belong to the
 * model and live as long as it does. */
typedef struct {
  const char* name;
  const char* dtype;
  int32_t ndim;
  const int64_t* shape;
  size_t nbytes;
} KilnTensorInfo;

/* Load the model library at `path`; *out is the model (NULL on failure). */
int kiln_model_load(const char* path, KilnModel** out);
/* Unload it (NULL is fine). */
void kiln_model_free(KilnModel* model);

int kiln_model_num_inputs(const KilnModel* model);
int kiln_model_num_outputs(const KilnModel* model);
int kiln_model_input_info(const KilnModel* model, int index, KilnTensorInfo* info);
int kiln_model_output_info(const KilnModel* model, int index, KilnTensorInfo* info);

/* Copy `nbytes` bytes (exactly the input's size, C order) into input `name`. */
int kiln_set_input(KilnModel* model, const char* name, const void* data, size_t nbytes);
/* Run every kernel in order; needs every input set (once: inputs keep their values). */
int kiln_run(KilnModel* model);
/* Copy output `index` (exactly its size in bytes) out to `data`. */
int kiln_get_output(const KilnModel* model, int index, void* data, size_t nbytes);

/* The last error of this thread, in words ("" if none). */
const char* kiln_last_error(void);

/* The thread pool (threadpool.c): threads one parallel kernel uses; 0 resets to the default. */
void kiln_set_num_threads(int32_t n);
int32_t kiln_get_num_threads(void);

#ifdef __cplusplus
}
#endif
#endif /* KILN_RUNTIME_H_ */
