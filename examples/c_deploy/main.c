/* The smallest program that runs a kiln model from C: load the library, fill each input from
 * a raw file (numpy: x.tofile("x.bin")), run, print the outputs.
 *
 *   ./main model.so x.bin [more inputs, in the model's order]
 */
#include <stdio.h>
#include <stdlib.h>

#include "kiln_runtime.h"

static int fail(const char* what) {
  fprintf(stderr, "%s: %s\n", what, kiln_last_error());
  return 1;
}

int main(int argc, char** argv) {
  KilnModel* model;
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL.so INPUT.bin...\n", argv[0]);
    return 2;
  }
  if (kiln_model_load(argv[1], &model) != KILN_OK) return fail("load");
  if (argc - 2 != kiln_model_num_inputs(model)) {
    fprintf(stderr, "the model takes %d inputs, got %d files\n", kiln_model_num_inputs(model),
            argc - 2);
    return 2;
  }
  for (int k = 0; k < kiln_model_num_inputs(model); ++k) {
    KilnTensorInfo info;
    kiln_model_input_info(model, k, &info);
    char* data = malloc(info.nbytes + 1); /* one byte more: a longer file is an error below */
    if (data == NULL) return 1;
    FILE* f = fopen(argv[2 + k], "rb");
    size_t got = f ? fread(data, 1, info.nbytes + 1, f) : 0;
    if (f) fclose(f);
    /* kiln_set_input checks the size: a file of the wrong length is an error, not a guess */
    if (kiln_set_input(model, info.name, data, got) != KILN_OK) return fail(argv[2 + k]);
    free(data);
  }
  if (kiln_run(model) != KILN_OK) return fail("run");
  for (int k = 0; k < kiln_model_num_outputs(model); ++k) {
    KilnTensorInfo info;
    kiln_model_output_info(model, k, &info);
    float* y = malloc(info.nbytes ? info.nbytes : 1);
    if (y == NULL) return 1;
    if (kiln_get_output(model, k, y, info.nbytes) != KILN_OK) return fail("get_output");
    printf("%s (%s):", info.name, info.dtype);
    for (size_t i = 0; i < info.nbytes / sizeof(float) && i < 10; ++i) printf(" %.6f", y[i]);
    printf("\n");
    free(y);
  }
  kiln_model_free(model);
  return 0;
}
