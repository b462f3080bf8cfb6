/* Run a whole execution graph in one native call: each kernel with its pre-bound arguments,
 * in order, stopping at the first failure (its index is reported). */
#include <stdint.h>

typedef int32_t (*kiln_function)(void* args, int32_t num_args);

int32_t kiln_run_graph(int32_t num_kernels, kiln_function* fns, void** args, const int32_t* num_args,
                       int32_t* failed) {
  for (int32_t k = 0; k < num_kernels; ++k) {
    int32_t status = fns[k](args[k], num_args[k]);
    if (status != 0) {
      *failed = k;
      return status;
    }
  }
  return 0;
}
