/* Time one compiled kernel on the device, for the tuner's DeviceRunner
 * (kiln/autotvm/device_runner.py):
 *
 *   time_kernel LIB SYMBOL BYTES,BYTES,... INPUTS [--dump FILE] [--number N] [--repeat R]
 *               [--min-repeat-ms MS] [--flush] [--threads T]
 *
 * The kernel's buffers (one per size, 64-byte aligned) are filled from INPUTS, their bytes one
 * after another. One untimed call, whose buffers --dump writes out (for the correctness check),
 * and a few milliseconds of warm-up; then R measurements of N calls each (N grows until one
 * measurement takes MS milliseconds, as kiln.runtime.time_evaluator does), printed as
 * "costs: S S ..." in seconds per call. With --flush, every buffer but the first is evicted
 * from the caches before each timed call (timer.c). Exit status: 0, 2 for bad arguments or
 * files, 3 when the kernel returns an error status (on stderr).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_runtime.h"

#define WARMUP_SECONDS 0.005
#define MAX_ARGS 256
#define GOLDEN_RATIO 1.618

typedef int32_t (*kiln_function)(void* args, int32_t num_args);
int32_t kiln_time_calls(kiln_function fn, void* args, int32_t num_args, int64_t number,
                        double* seconds);
int32_t kiln_time_calls_flushed(kiln_function fn, void* args, int32_t num_args, int64_t number,
                                char* const* addresses, const int64_t* sizes, int32_t num_buffers,
                                double* seconds);

static int usage(const char* why) {
  fprintf(stderr, "time_kernel: %s\n", why);
  return 2;
}

static int kernel_failed(const char* symbol, int32_t status) {
  fprintf(stderr, "time_kernel: %s returned status %d\n", symbol, (int)status);
  return 3;
}

int main(int argc, char** argv) {
  if (argc < 5) return usage("usage: LIB SYMBOL BYTES,... INPUTS [options]");
  const char *dump = NULL, *symbol = argv[2];
  int64_t number = 1;
  int repeat = 1, flush = 0;
  double min_repeat_ms = 0;
  for (int a = 5; a < argc; ++a) {
    if (a + 1 < argc && strcmp(argv[a], "--dump") == 0) dump = argv[++a];
    else if (a + 1 < argc && strcmp(argv[a], "--number") == 0) number = atoll(argv[++a]);
    else if (a + 1 < argc && strcmp(argv[a], "--repeat") == 0) repeat = atoi(argv[++a]);
    else if (a + 1 < argc && strcmp(argv[a], "--min-repeat-ms") == 0) min_repeat_ms = atof(argv[++a]);
    else if (a + 1 < argc && strcmp(argv[a], "--threads") == 0) kiln_set_num_threads(atoi(argv[++a]));
    else if (strcmp(argv[a], "--flush") == 0) flush = 1;
    else return usage("unknown option");
  }
  if (number < 1 || repeat < 1 || min_repeat_ms < 0) return usage("bad --number/--repeat");

  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "time_kernel: cannot load %s: %s\n", argv[1], dlerror());
    return 2;
  }
  kiln_function fn = (kiln_function)dlsym(lib, symbol);
  if (fn == NULL) {
    fprintf(stderr, "time_kernel: %s has no function %s\n", argv[1], symbol);
    return 2;
  }

  char* buffers[MAX_ARGS];
  int64_t sizes[MAX_ARGS];
  void* values[MAX_ARGS]; /* the calling convention's values: one data pointer per buffer */
  int32_t count = 0;
  for (char* field = strtok(argv[3], ","); field != NULL; field = strtok(NULL, ",")) {
    if (count == MAX_ARGS) return usage("too many buffers");
    sizes[count] = atoll(field);
    void* data = NULL;
    if (sizes[count] < 0 || posix_memalign(&data, 64, sizes[count] ? (size_t)sizes[count] : 64))
      return usage("cannot allocate a buffer");
    buffers[count] = values[count] = data;
    count++;
  }
  FILE* in = fopen(argv[4], "rb");
  if (in == NULL) return usage("cannot open the inputs file");
  for (int32_t b = 0; b < count; ++b)
    if (fread(buffers[b], 1, (size_t)sizes[b], in) != (size_t)sizes[b])
      return usage("the inputs file is shorter than the buffers");
  if (fgetc(in) != EOF) return usage("the inputs file is longer than the buffers");
  fclose(in);

  int32_t status = fn(values, count);
  if (status != 0) return kernel_failed(symbol, status);
  if (dump != NULL) {
    FILE* out = fopen(dump, "wb");
    if (out == NULL) return usage("cannot write the dump file");
    for (int32_t b = 0; b < count; ++b) fwrite(buffers[b], 1, (size_t)sizes[b], out);
    if (fclose(out) != 0) return usage("cannot write the dump file");
  }
  double seconds = 0, warm = 0;
  while (warm < WARMUP_SECONDS) {
    if ((status = kiln_time_calls(fn, values, count, 1, &seconds)) != 0)
      return kernel_failed(symbol, status);
    warm += seconds;
  }
  printf("costs:");
  for (int r = 0; r < repeat; ++r) {
    for (;;) {
      status = flush ? kiln_time_calls_flushed(fn, values, count, number, buffers + 1, sizes + 1,
                                               count - 1, &seconds)
                     : kiln_time_calls(fn, values, count, number, &seconds);
      if (status != 0) return kernel_failed(symbol, status);
      if (seconds * 1e3 >= min_repeat_ms) break;
      double per_call = seconds / (double)number;
      int64_t needed = per_call > 0 ? (int64_t)(min_repeat_ms / 1e3 / per_call) + 1 : number * 2;
      int64_t grown = (int64_t)((double)number * GOLDEN_RATIO);
      number = needed > grown ? needed : grown;
    }
    printf(" %.9e", seconds / (double)number);
  }
  printf("\n");
  return 0;
}
