/* Run a model library exported by kiln from C, through kiln's C runtime.
 *
 *   run_model MODEL.so [NAME=FILE ...] [-o DIR] [--repeat N] [--threads N]
 *
 * Each input is read from a raw file (its bytes in C order, of the input's dtype: numpy's
 * `x.tofile(FILE)`); an input given no file is an error that lists the inputs. Prints each
 * output's type and first values; with -o, writes each to DIR/output<k>.bin (read it back with
 * numpy.fromfile). --repeat runs the model N times more and prints the median time of one run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln_runtime.h"

static void* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (f == NULL) return NULL;
  void* data = NULL;
  if (fseek(f, 0, SEEK_END) == 0) {
    long n = ftell(f);
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (data = malloc(n ? (size_t)n : 1)) != NULL) {
      if (fread(data, 1, (size_t)n, f) != (size_t)n) {
        free(data);
        data = NULL;
      }
      *size = (size_t)n;
    }
  }
  fclose(f);
  return data;
}

static int write_file(const char* path, const void* data, size_t size) {
  FILE* f = fopen(path, "wb");
  if (f == NULL) return 0;
  int ok = fwrite(data, 1, size, f) == size;
  return fclose(f) == 0 && ok;
}

static void print_type(const KilnTensorInfo* info) {
  printf("%s: %s[", info->name, info->dtype);
  for (int d = 0; d < info->ndim; ++d) printf(d ? "x%lld" : "%lld", (long long)info->shape[d]);
  printf("]");
}

static void print_values(const KilnTensorInfo* info, const void* data) {
  size_t shown = 8, count;
  if (strcmp(info->dtype, "float32") == 0) {
    count = info->nbytes / 4;
    for (size_t k = 0; k < count && k < shown; ++k) printf(" %.6g", ((const float*)data)[k]);
  } else if (strcmp(info->dtype, "int64") == 0) {
    count = info->nbytes / 8;
    for (size_t k = 0; k < count && k < shown; ++k)
      printf(" %lld", (long long)((const long long*)data)[k]);
  } else {
    printf(" (%zu bytes)", info->nbytes);
    return;
  }
  if (count > shown) printf(" ... (%zu values)", count);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int compare_doubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static int usage_error(const char* why) {
  fprintf(stderr, "run_model: %s\n", why);
  return 1;
}

static int failed(const char* what) {
  fprintf(stderr, "run_model: %s: %s\n", what, kiln_last_error());
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL.so [NAME=FILE ...] [-o DIR] [--repeat N] [--threads N]\n",
            argv[0]);
    return 2;
  }
  const char* out_dir = NULL;
  int repeat = 0;
  KilnModel* model;
  if (kiln_model_load(argv[1], &model) != KILN_OK) return failed("load");
  for (int a = 2; a < argc; ++a) {
    if (strcmp(argv[a], "-o") == 0 && a + 1 < argc) {
      out_dir = argv[++a];
    } else if (strcmp(argv[a], "--repeat") == 0 && a + 1 < argc) {
      repeat = atoi(argv[++a]);
    } else if (strcmp(argv[a], "--threads") == 0 && a + 1 < argc) {
      kiln_set_num_threads(atoi(argv[++a]));
    } else {
      char* eq = strchr(argv[a], '=');
      if (eq == NULL) {
        fprintf(stderr, "run_model: %s is not NAME=FILE\n", argv[a]);
        return 2;
      }
      *eq = 0;
      size_t size = 0;
      void* data = read_file(eq + 1, &size);
      if (data == NULL) {
        fprintf(stderr, "run_model: cannot read %s\n", eq + 1);
        return 1;
      }
      int status = kiln_set_input(model, argv[a], data, size);
      free(data);
      if (status != KILN_OK) return failed("set_input");
    }
  }
  if (kiln_run(model) != KILN_OK) return failed("run");
  for (int k = 0; k < kiln_model_num_outputs(model); ++k) {
    KilnTensorInfo info;
    kiln_model_output_info(model, k, &info);
    void* data = malloc(info.nbytes ? info.nbytes : 1);
    if (data == NULL || kiln_get_output(model, k, data, info.nbytes) != KILN_OK)
      return failed("get_output");
    print_type(&info);
    print_values(&info, data);
    printf("\n");
    if (out_dir != NULL) {
      char path[4096];
      snprintf(path, sizeof path, "%s/%s.bin", out_dir, info.name);
      if (!write_file(path, data, info.nbytes)) {
        fprintf(stderr, "run_model: cannot write %s\n", path);
        return 1;
      }
    }
    free(data);
  }
  if (repeat > 0) {
    double* times = malloc(sizeof(double) * (size_t)repeat);
    if (times == NULL) return usage_error("out of memory");
    for (int r = 0; r < repeat; ++r) {
      double start = now();
      if (kiln_run(model) != KILN_OK) return failed("run");
      times[r] = now() - start;
    }
    qsort(times, (size_t)repeat, sizeof(double), compare_doubles);
    printf("median run: %.1f us over %d runs\n", times[repeat / 2] * 1e6, repeat);
    free(times);
  }
  kiln_model_free(model);
  return 0;
}
