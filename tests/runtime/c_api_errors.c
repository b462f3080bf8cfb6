/* Calls kiln's C API wrongly, one way per line of output: "label status message". The test
 * (test_c_runtime.py) checks each status and message; nothing here may crash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_runtime.h"

static void report(const char* label, int status) {
  printf("%s %d %s\n", label, status, status ? kiln_last_error() : "");
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  KilnModel* m = NULL;
  report("load_missing", kiln_model_load("/no/such/model.so", &m));
  report("load_null_out", kiln_model_load(argv[1], NULL));
  report("load", kiln_model_load(argv[1], &m));
  if (m == NULL) return 1;
  KilnTensorInfo info;
  report("input_info", kiln_model_input_info(m, 0, &info));
  size_t nbytes = info.nbytes;
  char* data = calloc(nbytes + 8, 1);
  report("run_unset", kiln_run(m));
  report("get_before_run", kiln_get_output(m, 0, data, 0));
  report("wrong_name", kiln_set_input(m, "no_such_input", data, nbytes));
  report("wrong_size", kiln_set_input(m, argv[2], data, nbytes + 4));
  report("null_data", kiln_set_input(m, argv[2], NULL, nbytes));
  report("input_index", kiln_model_input_info(m, 7, &info));
  report("output_index", kiln_model_output_info(m, -1, &info));
  report("set", kiln_set_input(m, argv[2], data, nbytes));
  report("run", kiln_run(m));
  KilnTensorInfo out;
  report("output_info", kiln_model_output_info(m, 0, &out));
  char* y = malloc(out.nbytes + 8);
  report("get_wrong_size", kiln_get_output(m, 0, y, out.nbytes + 1));
  report("get_index", kiln_get_output(m, 3, y, out.nbytes));
  report("get", kiln_get_output(m, 0, y, out.nbytes));
  kiln_model_free(m);
  kiln_model_free(NULL);
  free(data);
  free(y);
  return 0;
}
