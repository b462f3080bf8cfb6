/* Time `number` back-to-back calls of a compiled kiln function without Python in the loop,
 * so that measurements of small kernels are not dominated by interpreter overhead. */
#include <stdint.h>
#include <time.h>

typedef int32_t (*kiln_function)(void* args, int32_t num_args);

int32_t kiln_time_calls(kiln_function fn, void* args, int32_t num_args, int64_t number,
                        double* seconds) {
  struct timespec start, stop;
  int32_t status = 0;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (int64_t i = 0; i < number && status == 0; ++i) status = fn(args, num_args);
  clock_gettime(CLOCK_MONOTONIC, &stop);
  *seconds = (double)(stop.tv_sec - start.tv_sec) + 1e-9 * (double)(stop.tv_nsec - start.tv_nsec);
  return status;
}
